//! Per-VM counters of what its guests made armhv do.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($name:ident: $label:literal),* $(,)?) => {
        #[derive(Default)]
        pub struct VmStats {
            $(pub $name: AtomicU64,)*
        }

        impl core::fmt::Display for VmStats {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut first = true;
                $(
                    let v = self.$name.load(Relaxed);
                    if v != 0 {
                        if !first { f.write_str(", ")?; }
                        write!(f, concat!($label, " {}"), v)?;
                        first = false;
                    }
                )*
                if first { f.write_str("no exits")?; }
                Ok(())
            }
        }
    };
}

counters!(
    resets: "resets",
    exits: "exits",
    hypercalls: "hypercalls",
    smc: "smc",
    mmio: "mmio",
    aborts_injected: "aborts-injected",
    sysreg: "sysreg",
    sgi: "sgi",
    undef_injected: "undef-injected",
    wfx: "wfi/wfe",
    fp_switches: "fp-switches",
    sve_switches: "sve-switches",
    pauth_switches: "pauth-switches",
    debug_loads: "debug-loads",
    pmu_switches: "pmu-loads",
    pmu_irqs: "pmu-irqs",
    irq: "irq",
    passthrough_irqs: "assigned-irqs",
    device_irqs: "emulated-irqs",
    input_dropped: "input-dropped",
    frames_in: "frames-in",
);

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}
