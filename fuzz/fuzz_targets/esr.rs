//! Fuzzes the trap decoder: `trap::decode` on arbitrary `ESR_EL2`, `FAR_EL2`
//! and `HPFAR_EL2` values, the fatal-exception rendering of the syndrome, the
//! SMCCC function-ID fields and the exception-injection arithmetic.
//!
//! Input layout: three little-endian u64s, ESR, FAR, HPFAR (missing bytes are
//! zero, extra bytes ignored).
//!
//! Checked besides "no panic": the exit's class matches `ESR.EC`; a decoded
//! MMIO access has a valid width and a transfer register 0..=31 and its load
//! and store values fit the access; the faulting IPA is `HPFAR.FIPA` plus
//! the page offset of a valid FAR, below 2^56; fault kinds round-trip to
//! their status code; system-register accesses re-encode; an injected
//! exception's syndrome decodes as the exception injected.
#![no_main]

use std::fmt::Write;

use libfuzzer_sys::fuzz_target;
use trap::esr::ec;
use trap::smccc::FunctionId;
use trap::{
    AbortKind, AccessWidth, Esr, Exit, FaultKind, MmioAccess, SysReg, decode, ec_name, fsc_name,
    inject_abort, inject_undef,
};

fn words(data: &[u8]) -> [u64; 3] {
    let mut buf = [0u8; 24];
    let n = data.len().min(24);
    buf[..n].copy_from_slice(&data[..n]);
    [0, 1, 2].map(|i| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap()))
}

fn check_mmio(m: &MmioAccess, esr: u64) {
    assert!(m.reg <= 31, "SRT {} from {esr:#x}", m.reg);
    assert!(matches!(m.width.bytes(), 1 | 2 | 4 | 8));
    assert_eq!(AccessWidth::from_bytes(m.width.bytes()), Some(m.width));
    for raw in [0, u64::MAX, esr, 0x8000_0000_8000_8080] {
        let v = m.load_value(raw);
        if !m.sixty_four {
            assert!(v <= u64::from(u32::MAX), "W register load {v:#x}");
        }
        if !m.sign_extend {
            assert_eq!(v & !m.width.mask(), 0, "load {v:#x} wider than {}", m.width);
        }
        // The low bits are the device's, whatever the extension.
        assert_eq!(v & m.width.mask() & 0xffff_ffff, raw & m.width.mask() & 0xffff_ffff);
        assert_eq!(m.store_value(raw), raw & m.width.mask());
    }
}

fn check_fault(kind: FaultKind, iss: u32) {
    let fsc = (iss & 0x3f) as u8;
    assert_eq!(kind, FaultKind::from_fsc(fsc));
    assert_eq!(kind.fsc(), fsc, "{kind:?}");
    assert!(!fsc_name(fsc).is_empty());
}

fn check_ipa(ipa: u64, far: u64, far_valid: bool, hpfar: u64) {
    assert!(ipa < 1 << 56, "IPA {ipa:#x}");
    assert_eq!(ipa & !0xfff, ((hpfar >> 4) & ((1 << 44) - 1)) << 12);
    assert_eq!(ipa & 0xfff, if far_valid { far & 0xfff } else { 0 });
}

fuzz_target!(|data: &[u8]| {
    let [esr, far, hpfar] = words(data);
    let e = Esr(esr);
    let iss = e.iss();
    assert_eq!(Esr::new(e.ec(), e.il(), iss).0, esr & 0xffff_ffff);
    assert!(matches!(e.instr_len(), 2 | 4));

    match decode(esr, far, hpfar) {
        Exit::Wfx { .. } => assert_eq!(e.ec(), ec::WFX),
        Exit::Hvc { imm } => {
            assert_eq!(e.ec(), ec::HVC64);
            assert_eq!(u32::from(imm), iss & 0xffff);
        }
        Exit::Smc { imm } => {
            assert_eq!(e.ec(), ec::SMC64);
            assert_eq!(u32::from(imm), iss & 0xffff);
        }
        Exit::SysReg(a) => {
            assert_eq!(e.ec(), ec::SYS64);
            assert!(a.rt <= 31 && a.op0 <= 3 && a.op1 <= 7 && a.op2 <= 7);
            assert!(a.crn <= 15 && a.crm <= 15);
            let r = a.encoding();
            assert_eq!(SysReg::new(r.op0(), r.op1(), r.crn(), r.crm(), r.op2()), r);
            assert_eq!(
                (r.op0(), r.op1(), r.crn(), r.crm(), r.op2()),
                (a.op0, a.op1, a.crn, a.crm, a.op2)
            );
            let mut s = String::new();
            write!(s, "{a} {r} {r:?}").unwrap();
            assert!(!s.is_empty());
            let _ = (r.is_feature_id(), r.is_set_way());
        }
        Exit::DataAbort(d) => {
            assert!(matches!(e.ec(), ec::DABT_LOW | ec::DABT_CUR));
            assert_eq!(d.far, far);
            assert_eq!(d.mmio.is_some(), iss & (1 << 24) != 0);
            if let Some(m) = &d.mmio {
                check_mmio(m, esr);
                assert_eq!(m.write, d.write);
            }
            check_fault(d.fault, iss);
            check_ipa(d.ipa.0, far, d.far_valid, hpfar);
        }
        Exit::InstrAbort(i) => {
            assert!(matches!(e.ec(), ec::IABT_LOW | ec::IABT_CUR));
            assert_eq!(i.far, far);
            check_fault(i.fault, iss);
            check_ipa(i.ipa.0, far, i.far_valid, hpfar);
        }
        Exit::FpAccess => assert_eq!(e.ec(), ec::FP_ASIMD),
        Exit::Sve => assert_eq!(e.ec(), ec::SVE),
        Exit::Unknown { ec, iss: i } => {
            assert_eq!((ec, i), (e.ec(), iss));
        }
    }

    // The fatal-exception path renders any syndrome, naming the class first.
    let mut s = String::new();
    write!(s, "{e}").unwrap();
    assert!(s.starts_with(&format!("EC {:#04x} ({})", e.ec(), ec_name(e.ec()))), "{s}");
    write!(s, "{e:?}").unwrap();

    // SMCCC: the function ID is w0.
    let f = FunctionId::from_x0(esr);
    assert_eq!(f.0, esr as u32);
    assert_eq!(f.without_hints().0 & FunctionId::SVE_HINT, 0);
    assert!(f.oen() < 64);
    let _ = (f.is_fast(), f.is_smc64(), f.owner(), f.number(), f.is_well_formed());

    // Injection, with FAR and HPFAR standing in for the guest's SPSR and SCTLR.
    let write = hpfar & 1 != 0;
    for (inj, kind) in [
        (inject_abort(far, hpfar, AbortKind::Data { write }), Some(AbortKind::Data { write })),
        (inject_abort(far, hpfar, AbortKind::Instruction), Some(AbortKind::Instruction)),
        (inject_undef(far, hpfar), None),
    ] {
        assert!(matches!(inj.vector_offset, 0 | 0x200 | 0x400 | 0x600));
        // EL1h with D, A, I, F masked.
        assert_eq!(inj.new_spsr & 0x3ff, 0x3c5);
        let back = Esr(inj.esr_el1);
        assert!(back.il());
        match (kind, decode(inj.esr_el1, 0, 0)) {
            (Some(AbortKind::Data { write }), Exit::DataAbort(d)) => {
                assert_eq!(d.write, write);
                assert_eq!(d.fault, FaultKind::SyncExternal);
                assert!(d.mmio.is_none() && d.far_valid);
            }
            (Some(AbortKind::Instruction), Exit::InstrAbort(i)) => {
                assert_eq!(i.fault, FaultKind::SyncExternal);
            }
            (None, Exit::Unknown { ec: 0, iss: 0 }) => {}
            (k, exit) => panic!("injected {k:?}, decodes as {exit:?}"),
        }
    }
});
