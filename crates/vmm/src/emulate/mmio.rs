//! Stage-2 data aborts: an access to an emulated device is performed on the device model and
//! the guest resumes after the instruction; an access to anything else the VM was not given
//! becomes a synchronous external abort in the guest. Neither reaches host memory.
//!
//! A load or store whose syndrome describes it (the common case) is decoded alone
//! (`trap::exit::decode_mmio`). The guest's GIC frames, which a guest touches far more often
//! than any other device, are then recognized by address and the access performed on the vGIC
//! model directly; other devices are found on the device bus. Every other abort (a stage-1
//! walk, no syndrome, an address nothing answers) takes the general path, decoded in full.

use super::{network, vgic};
use crate::exit_ctx::ExitCtx;
use crate::{Action, stats};
use addr::Ipa;
use trap::exit::{Exit, MmioAccess};
use vdev::MmioError;

pub fn data_abort(ctx: &mut ExitCtx) -> Action {
    let Some((ipa, access)) = ctx.mmio_access() else {
        return general(ctx);
    };
    let result = match vgic::frame_at(ipa, ctx.vm) {
        Some((frame, offset)) => gic_access(ctx, frame, offset, access).map(|()| Done::Complete),
        None => match bus_access(ctx, ipa, access) {
            Some(result) => result,
            None => return general(ctx),
        },
    };
    performed(ctx, ipa, result)
}

/// The guest's next step after an access to an emulated device.
#[inline(always)]
fn performed(ctx: &mut ExitCtx, ipa: Ipa, result: Result<Done, MmioError>) -> Action {
    stats::bump(&ctx.vm.stats.mmio);
    match result {
        Ok(Done::Complete) => {
            ctx.skip_instruction();
            Action::Resume
        }
        // The store executes again and the device goes on (`MmioDevice::write_unfinished`).
        Ok(Done::Repeat) => Action::Resume,
        Err(e) => refused(ctx, ipa, e),
    }
}

/// What became of an access a device accepted.
enum Done {
    Complete,
    /// The device left work for the guest's store to come back for.
    Repeat,
}

/// Performs `access` on the emulated device at `ipa`, if there is one: the vGIC, else what the
/// device bus has there.
fn device_access(
    ctx: &mut ExitCtx,
    ipa: Ipa,
    access: MmioAccess,
) -> Option<Result<Done, MmioError>> {
    match vgic::frame_at(ipa, ctx.vm) {
        Some((frame, offset)) => {
            Some(gic_access(ctx, frame, offset, access).map(|()| Done::Complete))
        }
        None => bus_access(ctx, ipa, access),
    }
}

/// An access to the vGIC's frames, the device a guest touches most: on the model directly.
#[inline(always)]
fn gic_access(
    ctx: &mut ExitCtx,
    frame: ::vgic::Frame,
    offset: u64,
    access: MmioAccess,
) -> Result<(), MmioError> {
    let woken = vgic::mmio(ctx.vm, ctx.vcpu, frame, offset, access)?;
    // Told at once, as the GICv3's SGI register does (`sysreg`): a GICv2's IPI is this
    // write (GICD_SGIR), and its kick is the IPI's latency. The vGIC's lock is released.
    crate::sched::notify(ctx.vm, woken);
    Ok(())
}

/// Performs `access` on the device at `ipa`, if the bus has one there.
fn bus_access(ctx: &mut ExitCtx, ipa: Ipa, access: MmioAccess) -> Option<Result<Done, MmioError>> {
    let vm = ctx.vm;
    // Before a device looks at the guest's RAM: whether the guest wrote it with caches off.
    // (The vGIC, reached before the bus, reads no guest RAM.)
    vm.memory.coherency().observe_live(ctx.vcpu.id, &mut ctx.vcpu.caches_seen);
    let mut bus = vm.devices.lock();
    let (device, offset) = bus.lookup(ipa)?;
    let result = if access.write {
        let value = access.store_value(ctx.vcpu.regs.get(access.reg));
        device
            .write(offset, access.width, value)
            .map(|()| if device.write_unfinished() { Done::Repeat } else { Done::Complete })
    } else {
        device.read(offset, access.width).map(|raw| {
            ctx.vcpu.regs.set(access.reg, access.load_value(raw));
            Done::Complete
        })
    };
    let woken = vgic::set_device_irq(vm, device.irq_change());
    drop(bus);
    ctx.wake.interrupts(vm.id, woken);
    if !vm.nics.is_empty() {
        network::forward_frames(vm, ctx.wake);
    }
    Some(result)
}

/// A device refused the access (`MmioError`): the guest gets a data abort, as from a bus.
#[cold]
#[inline(never)]
fn refused(ctx: &mut ExitCtx, ipa: Ipa, e: MmioError) -> Action {
    log::debug!("{}: device access at {ipa} refused ({e:?}): injecting a data abort", ctx.vm.name);
    ctx.inject_abort(true)
}

/// The general path: any data abort, decoded in full.
#[inline(never)]
fn general(ctx: &mut ExitCtx) -> Action {
    let Exit::DataAbort(dabt) = ctx.exit() else {
        return ctx.fault("data abort that does not decode as one");
    };
    let vm = ctx.vm;
    if dabt.s1ptw {
        if let Some(n) = ctx.abort_worth_logging() {
            log::warn!(
                "{}: its page-table walk touched {} outside its RAM (PC {:#x}): injecting an \
                 abort (abort #{n})",
                vm.name,
                dabt.ipa,
                ctx.vcpu.regs.elr
            );
        }
        return ctx.inject_abort(true);
    }
    let name = vm.devices.lock().lookup(dabt.ipa).map(|(device, _)| device.name());
    let Some(name) = name else {
        if let Some(n) = ctx.abort_worth_logging() {
            log::info!(
                "{}: {} of IPA {} outside its memory and devices (PC {:#x}): injecting a data \
                 abort (abort #{n})",
                vm.name,
                if dabt.write { "write" } else { "read" },
                dabt.ipa,
                ctx.vcpu.regs.elr
            );
        }
        return ctx.inject_abort(true);
    };
    let Some(access) = dabt.mmio else {
        // No syndrome (e.g. a load/store pair or writeback addressing): not emulated, as on
        // KVM; the guest gets an abort rather than a silently wrong result.
        if let Some(n) = ctx.abort_worth_logging() {
            log::warn!(
                "{}: {} access without a valid syndrome at PC {:#x}: injecting a data abort \
                 (abort #{n})",
                vm.name,
                name,
                ctx.vcpu.regs.elr
            );
        }
        return ctx.inject_abort(true);
    };
    // A syndrome, but a form the fast decode leaves here (FAR not valid, a cache maintenance
    // operation): performed as before.
    let result = device_access(ctx, dabt.ipa, access).unwrap_or(Err(MmioError::Unmapped));
    performed(ctx, dabt.ipa, result)
}
