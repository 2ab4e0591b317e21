//! `rtc=N`: alarms of the PL031 real-time clock, if the device tree has one.
//! Under armhv the RTC is a physical device assigned to the VM: its
//! registers are mapped straight into the guest and its interrupt arrives as a
//! hardware-linked virtual SPI, completed by this guest's EOI.

use baremetal::console::Global;

use crate::{gic, println, psci, steps, time};

const RTCDR: u64 = 0x00; // current time, seconds
const RTCMR: u64 = 0x04; // match: the alarm fires when RTCDR reaches it
const RTCCR: u64 = 0x0c; // bit 0 starts the clock
const RTCIMSC: u64 = 0x10; // bit 0 unmasks the alarm interrupt
const RTCRIS: u64 = 0x14; // bit 0: the alarm interrupt is raised (before the mask)
const RTCICR: u64 = 0x1c; // write 1 to clear the alarm interrupt

static BASE: Global<u64> = Global::new(0);
static INTID: Global<u32> = Global::new(0);
static ALARMS: Global<u64> = Global::new(0);
/// `rtc-eoi-first`: the handler completes the interrupt in the GIC before it clears the
/// device, as some drivers do; and every interrupt taken is counted, raised alarm or not.
static EOI_FIRST: Global<bool> = Global::new(false);
static TAKEN: Global<u64> = Global::new(0);

fn read(offset: u64) -> u32 {
    // SAFETY: a register of the PL031 the device tree names; reads have no side effects.
    unsafe { ((BASE.get() + offset) as *const u32).read_volatile() }
}

fn write(offset: u64, value: u32) {
    // SAFETY: a register of the PL031 the device tree names; it touches no memory.
    unsafe { ((BASE.get() + offset) as *mut u32).write_volatile(value) }
}

/// Records the RTC from the device tree: register base and interrupt INTID.
pub fn configure(base: u64, intid: u32) {
    BASE.set(base);
    INTID.set(intid);
}

pub fn intid() -> Option<u32> {
    (BASE.get() != 0).then(|| INTID.get())
}

/// Whether the handler completes the interrupt before clearing the device (`rtc-eoi-first`).
pub fn eoi_first() -> bool {
    EOI_FIRST.get()
}

/// The alarm interrupt (from `gic::handle_irq`): clear it at the device, before the EOI
/// unless `rtc-eoi-first`, so the level-sensitive line drops. An interrupt with no alarm
/// raised at the device (RTCRIS) is not an alarm: a spurious second interrupt.
pub fn on_interrupt() {
    TAKEN.set(TAKEN.get() + 1);
    if read(RTCRIS) & 1 != 0 {
        ALARMS.set(ALARMS.get() + 1);
    }
    write(RTCICR, 1);
}

/// `rtc-eoi-first=N`: `rtc=N` with a handler that completes the interrupt in the GIC first,
/// then clears the device, then makes a firmware call (a driver's next register access or log
/// line); the line is still high at the EOI, and drops before the handler returns. On the
/// machine each alarm is one interrupt:
/// `testguest: rtc-eoi-first <taken> interrupts for <n> alarms`.
pub fn step_eoi_first(n: u64) {
    EOI_FIRST.set(true);
    TAKEN.set(0);
    step(n);
    EOI_FIRST.set(false);
    if intid().is_some() {
        println!("testguest: rtc-eoi-first {} interrupts for {} alarms", TAKEN.get(), ALARMS.get());
    }
}

pub fn step(n: u64) {
    if !steps::need_gic("rtc") {
        return;
    }
    let Some(intid) = intid() else {
        println!("testguest: rtc absent");
        return;
    };
    gic::enable_spi(intid, true);
    write(RTCCR, 1);
    ALARMS.set(0);
    TAKEN.set(0);
    let before = psci::vm_exits();
    let start = time::counter();
    for k in 1..=n {
        write(RTCMR, read(RTCDR).wrapping_add(1));
        write(RTCIMSC, 1);
        // An alarm comes within a second; allow three.
        if !gic::wait_ms(3000, || ALARMS.get() >= k) {
            write(RTCIMSC, 0);
            println!("testguest: rtc timed out after {} of {n} alarms", ALARMS.get());
            return;
        }
    }
    write(RTCIMSC, 0);
    let ms = time::ticks_to_ms(time::counter() - start);
    let exits = steps::Exits(before, psci::vm_exits());
    println!("testguest: rtc {n} alarms in {ms} ms, {exits}");
}
