//! Each vCPU's own PMU (`emulate::pmu`) through the per-CPU loop on the fake hardware: VMs
//! `a` and `b` share CPU 3 and yield to each other; `solo` resets on CPU 1; `none`
//! (`pmu = "off"`) runs on CPU 2.
//! The fake's PMU registers are the physical PMU: what armhv leaves in them at each guest
//! entry is what that guest would count with.

mod common;

use common::{Machine, hvc, store, sysreg};
use guest_abi::hypercall::ARMHV_YIELD;
use guest_abi::map;
use vgic::regs::{GICD_CTLR, GICD_IGROUPR, GICD_ISENABLER, GICR_SGI_BASE};
use vmm::arch::{PPI_PMU, fake};
use vmm::cpu_loop::Step;

const CONFIG: &str = r#"
[[vm]]
name = "a"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "b"
vcpus = 1
cpu_affinity = [3]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "solo"
vcpus = 1
cpu_affinity = [1]
memory_size = "16M"
kernel = "@testguest"

[[vm]]
name = "none"
vcpus = 1
cpu_affinity = [2]
memory_size = "16M"
kernel = "@testguest"
pmu = "off"
"#;

const CPU: usize = 3;
type Enc = (u32, u32, u32, u32, u32);
const PMCR: Enc = (3, 3, 9, 12, 0);
const PMCNTENSET: Enc = (3, 3, 9, 12, 1);
const PMOVSCLR: Enc = (3, 3, 9, 12, 3);
const PMCCFILTR: Enc = (3, 3, 14, 15, 7);
const PMEVTYPER0: Enc = (3, 3, 14, 12, 0);
const PMEVCNTR0: Enc = (3, 3, 14, 8, 0);
const PMEVCNTR6: Enc = (3, 3, 14, 8, 6);
const ID_AA64DFR0: Enc = (3, 0, 0, 5, 0);
/// PMEVTYPER<n>_EL0.NSH / PMCCFILTR_EL0.NSH: count at EL2.
const NSH: u64 = 1 << 27;
/// What armhv's own use left in the cycle counter, which must survive the guests.
const HOST_CYCLES: u64 = 0xa4a4_0000;

fn yield_() -> fake::Trap {
    hvc(ARMHV_YIELD, &[])
}

/// `trap`, with `check` run first as the guest enters (keeping what the trap's own script does).
fn checked(
    mut trap: fake::Trap,
    check: impl FnOnce(&[u64; vmm::arch::MAX_LRS]) + 'static,
) -> fake::Trap {
    let own = trap.run.take();
    trap.after(move |regs, lrs| {
        check(lrs);
        if let Some(own) = own {
            own(regs, lrs);
        }
    })
}

fn name(step: Step) -> &'static str {
    match step {
        Step::Ran { vm: 0, .. } => "a",
        Step::Ran { vm: 1, .. } => "b",
        other => panic!("CPU {CPU} ran {other:?}"),
    }
}

/// The physical PMU as the guest about to run finds it.
fn hw() -> vmm::arch::PmuState {
    fake::with(|f| f.pmu[CPU].clone())
}

#[test]
fn each_vcpu_has_its_own_pmu() {
    let mut m = common::install(CONFIG);
    fake::with(|f| {
        f.pmu[CPU].pmccntr = HOST_CYCLES;
        f.pmu[CPU].pmcntenset = 1 << 31;
    });
    // The first to run leaves its PMU untouched: nothing is loaded for it.
    let p = name(m.step(CPU, vec![yield_()]));
    assert!(fake::with(|f| f.pmu_host[CPU].is_none()), "an untouched PMU was loaded");
    let q = name(m.step(CPU, programs_and_counts()));
    assert_ne!(p, q, "a yield gave the CPU to no other vCPU");
    let regs = m.regs(q, 0);
    assert_eq!(regs.x[5], 0x08, "PMEVTYPER0 reads back without NSH");
    assert_eq!((regs.x[10] >> 8) & 0xf, 1, "a virtual PMU shows its PMUVer");
    let live = hw();
    assert_eq!(live.pmevtyper[0], 0x08, "{q} counts at EL2: NSH reached the hardware");
    assert_eq!(live.pmccfiltr, 1 << 31, "{q}'s cycle counter filter kept NSH");

    // The other vCPU finds armhv's state, then a fresh PMU of its own, not q's counts.
    m.step(
        CPU,
        vec![
            checked(sysreg(PMEVCNTR0, 6, true, 0), |_| {
                let hw = hw();
                assert_eq!(hw.pmccntr, HOST_CYCLES, "q's counters stayed in the hardware");
                assert_eq!(hw.pmevcntr[0], 0);
            }),
            yield_(),
        ],
    );
    assert_eq!(m.regs(p, 0).x[6], 0, "{p} read {q}'s counter");

    // q counts again from where it was, its overflow interrupt arrives as PPI 23 and goes
    // quiet once the guest clears the overflow; a counter it does not have is UNDEFINED.
    let step = m.step(CPU, counts_and_overflows());
    assert_eq!(name(step), q);
    assert_eq!(m.regs(q, 0).x[7], 1000, "{q}'s counter after it was switched out and back");
    assert!(fake::with(|f| f.injected[CPU].is_some()), "PMEVCNTR6 (N = 6) was not UNDEFINED");
    assert_eq!(fake::with(|f| f.ppis_disabled[CPU]) & (1 << PPI_PMU), 0, "PPI 23 left silenced");
    let stats = &m.vm(q).stats.to_string();
    assert!(stats.contains("pmu-irqs 1"), "{stats}");

    // Back to p: armhv's own cycle counter is as it left it.
    m.step(
        CPU,
        vec![checked(yield_(), |_| {
            assert_eq!(hw().pmccntr, HOST_CYCLES, "armhv's cycle counter was not given back")
        })],
    );

    a_reset_forgets_the_pmu_state(&mut m);

    // Without a PMU: registers read as zero, writes go nowhere, the ID register shows none.
    m.step(
        2,
        vec![
            sysreg(PMCR, 1, false, 0x41),
            sysreg(PMCR, 8, true, 0),
            sysreg(ID_AA64DFR0, 9, true, 0),
            yield_(),
        ],
    );
    let regs = m.regs("none", 0);
    assert_eq!((regs.x[8], (regs.x[9] >> 8) & 0xf), (0, 0), "pmu = \"off\" shows a PMU");
    assert!(fake::with(|f| f.pmu_host[2].is_none() && f.pmu[2].pmcr == 0));
}

/// The guest turns its GIC on with the PMU's PPI 23 enabled, enables counter 0 (instructions)
/// and the cycle counter, each asking for EL2 too, and counts 1000 instructions and 2000
/// cycles.
fn programs_and_counts() -> Vec<fake::Trap> {
    let sgi_frame = map::GICR_BASE.0 + GICR_SGI_BASE;
    vec![
        store(map::GICD_BASE.0 + GICD_CTLR, 4, 3, 0x3),
        store(sgi_frame + GICD_IGROUPR, 4, 3, 0xffff_ffff),
        store(sgi_frame + GICD_ISENABLER, 4, 3, 1 << PPI_PMU),
        checked(sysreg(PMCNTENSET, 1, false, (1 << 31) | 1), |_| {
            assert_eq!(hw().pmccntr, HOST_CYCLES);
        }),
        sysreg(PMEVTYPER0, 1, false, 0x08 | NSH),
        sysreg(PMCCFILTR, 1, false, NSH | (1 << 31)),
        sysreg(PMCR, 1, false, 1),
        sysreg(PMEVTYPER0, 5, true, 0),
        checked(sysreg(ID_AA64DFR0, 10, true, 0), |_| {
            fake::with(|f| {
                f.pmu[CPU].pmevcntr[0] = 1000;
                f.pmu[CPU].pmccntr = 2000;
            })
        }),
        yield_(),
    ]
}

fn counts_and_overflows() -> Vec<fake::Trap> {
    vec![
        checked(sysreg(PMEVCNTR0, 7, true, 0), |_| {
            let hw = hw();
            assert_eq!((hw.pmevcntr[0], hw.pmccntr), (1000, 2000), "counting state not reloaded");
        }),
        fake::Trap::irq().after(|_, _| {
            fake::with(|f| {
                f.pmu[CPU].pmovsset |= 1;
                f.pmu[CPU].pmintenset |= 1;
                f.pending[CPU].push_back(PPI_PMU);
            })
        }),
        checked(sysreg(PMOVSCLR, 1, false, 1), |lrs| {
            assert!(
                lrs.iter().any(|lr| lr & 0xffff_ffff == 23),
                "the overflow is not in a list register: {lrs:x?}"
            );
            let silenced = fake::with(|f| f.ppis_disabled[CPU]) & (1 << PPI_PMU) != 0;
            assert!(silenced, "the physical PPI fires on while the guest handles it");
        }),
        sysreg(PMEVCNTR6, 1, true, 0),
        yield_(),
    ]
}

/// A VM reset while its counters count: the restarted vCPU finds armhv's state in the
/// hardware and a fresh PMU, not its counts from before.
fn a_reset_forgets_the_pmu_state(m: &mut Machine) {
    const SOLO: usize = 1;
    let solo = &m.vm("solo");
    m.step(
        SOLO,
        vec![
            sysreg(PMCNTENSET, 1, false, 1),
            sysreg(PMCR, 1, false, 1),
            checked(hvc(smccc::psci::PSCI_SYSTEM_RESET, &[]), |_| {
                fake::with(|f| f.pmu[SOLO].pmevcntr[0] = 777);
            }),
        ],
    );
    assert!(solo.is_resetting(), "the reset began");
    let mut steps = 0;
    while solo.is_resetting() {
        m.step(SOLO, vec![]);
        steps += 1;
        assert!(steps < 100, "the reset does not end");
    }
    m.step(
        SOLO,
        vec![
            checked(sysreg(PMEVCNTR0, 4, true, 0), |_| {
                let (hw, host) = fake::with(|f| (f.pmu[SOLO].clone(), f.pmu_host[SOLO].clone()));
                assert!(host.is_none(), "the reset vCPU's old PMU state is still loaded");
                assert_eq!(hw.pmevcntr[0], 0, "armhv's state was not given back at the reset");
            }),
            yield_(),
        ],
    );
    assert_eq!(m.regs("solo", 0).x[4], 0, "a reset vCPU read its counter from before");
}
