//! `io-out`, `io-in` and `io-roundtrip`: one virtio-rng request at a time.
//!
//! Each iteration offers a 16-byte buffer, stamps t0 and writes QueueNotify;
//! the device fills the buffer and raises its interrupt, whose handler stamps
//! t2 first thing (`irq.rs`). Then, outside the timed parts, ARMHV_IO_STAMPS
//! says when armhv saw the notify (x1) and raised the interrupt (x2):
//! io-out = x1 - t0, io-in = t2 - x2, io-roundtrip = t2 - t0.

use baremetal::psci;
use baremetal::{cpu, gic, time};
use guest_abi::hypercall::ARMHV_IO_STAMPS;

use crate::bench::{self, Runner, WAIT_MS};
use crate::clock::{Clock, Cntvct, Pmu};
use crate::{Ctx, irq, skip};
use baremetal::virtio_rng::{self as virtio, Device};

/// ARMHV_IO_STAMPS: (x0, notify time, interrupt time, 1 if PMU cycles).
fn io_stamps() -> (u64, u64, u64, u64) {
    let [x0, x1, x2, x3] = psci::call(ARMHV_IO_STAMPS, 0, 0, 0);
    (x0, x1, x2, x3)
}

/// Which of the three results to print (`io-roundtrip` always).
pub struct Wanted {
    pub out: bool,
    pub r#in: bool,
}

pub fn io(r: &mut Runner, ctx: &Ctx, wanted: Wanted) {
    let skip_all = |reason: core::fmt::Arguments| {
        for (name, want) in [("io-out", wanted.out), ("io-in", wanted.r#in), ("io-roundtrip", true)]
        {
            if want {
                skip(name, reason);
            }
        }
    };
    let Some(rng) = ctx.rng else {
        return skip_all(format_args!("no virtio-rng device (virtio-mmio DeviceID 4)"));
    };
    let Some(intid) = rng.intid else {
        return skip_all(format_args!("virtio-rng at {:#x} has no SPI", rng.base));
    };
    if !gic::present() {
        return skip_all(format_args!("no GIC in the device tree"));
    }

    // The stamps' unit decides the clock of the whole loop.
    let (status, _, _, unit_pmu) = io_stamps();
    let stamps = status == 0;
    let why_no_stamps = if stamps {
        None
    } else if ctx.armhv {
        Some("armhv has no ARMHV_IO_STAMPS")
    } else {
        Some("not armhv (no ARMHV_IO_STAMPS)")
    };
    let (pmu, why_no_stamps) = match (stamps, unit_pmu == 1, ctx.pmu) {
        (false, _, pmu) => (pmu, why_no_stamps),
        (true, true, false) => {
            (false, Some("ARMHV_IO_STAMPS counts PMU cycles, the PMU is unusable"))
        }
        // Stamps in CNTVCT units while we use the PMU: the whole loop uses CNTVCT.
        (true, stamps_pmu, _) => (stamps_pmu, None),
    };

    let mut dev = match Device::init(rng.base) {
        Ok(dev) => dev,
        Err(e) if e.is_failure() => panic!("virtio-rng at {:#x}: {e}", rng.base),
        Err(e) => return skip_all(format_args!("virtio-rng at {:#x}: {e}", rng.base)),
    };
    irq::set_virtio(rng.base, intid);
    irq::use_clock(pmu);
    // Level-sensitive whatever the DT's flags say (QEMU's say edge): the line stays
    // asserted until the handler's InterruptACK.
    gic::enable_spi(intid, true);
    cpu::irqs_on();
    let result = if pmu {
        run::<Pmu>(r, &mut dev, stamps && why_no_stamps.is_none())
    } else {
        run::<Cntvct>(r, &mut dev, stamps && why_no_stamps.is_none())
    };
    cpu::irqs_off();
    gic::disable_spi(intid);
    dev.reset();
    irq::set_virtio(0, 0);
    if let Err(e) = result {
        panic!("virtio-rng at {:#x}: {e}", rng.base);
    }

    let unit = if pmu { Pmu::UNIT } else { Cntvct::UNIT };
    // The overhead was measured with the main clock.
    let overhead = if pmu == ctx.pmu { r.overhead } else { 0 };
    let [out, r#in, roundtrip] = r.sets();
    for (name, want, samples) in [("io-out", wanted.out, out), ("io-in", wanted.r#in, r#in)] {
        match (want, why_no_stamps) {
            (false, _) => {}
            (true, Some(why)) => skip(name, format_args!("{why}")),
            (true, None) => bench::report(name, unit, samples, 0, format_args!("")),
        }
    }
    bench::report("io-roundtrip", unit, roundtrip, overhead, format_args!(""));
}

/// The request loop: warm-up, then `n` samples into sets 0 (out), 1 (in) and
/// 2 (round trip). IRQs are unmasked.
fn run<C: Clock>(r: &mut Runner, dev: &mut Device, stamps: bool) -> Result<(), virtio::Error> {
    let (warmup, n) = (r.warmup, r.n);
    let [out, r#in, roundtrip] = r.sets();
    for i in 0..warmup + n {
        dev.offer_buffer();
        let count = irq::count();
        let t0 = C::stamp_store32(dev.notify_address(), 0);
        let deadline = time::counter() + time::ms_to_ticks(WAIT_MS);
        while irq::count() == count || !dev.all_used() {
            dev.check()?;
            if time::passed(deadline) {
                panic!("virtio-rng: no interrupt for request {}", i + 1);
            }
            cpu::yield_now();
        }
        let t2 = irq::stamp();
        dev.check()?;
        let (x1, x2) = if stamps {
            let (_, x1, x2, _) = io_stamps();
            (x1, x2)
        } else {
            (0, 0)
        };
        if let Some(k) = i.checked_sub(warmup) {
            out[k] = x1.saturating_sub(t0);
            r#in[k] = t2.saturating_sub(x2);
            roundtrip[k] = t2.saturating_sub(t0);
        }
    }
    Ok(())
}
