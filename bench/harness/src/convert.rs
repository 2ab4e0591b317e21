//! From vmbench's counter units to instructions (under icount) or nanoseconds (wall clock).
//!
//! Under `-icount shift=0` QEMU's virtual clock advances exactly 1 ns per instruction executed,
//! and the PMU cycle counter counts one per instruction. So:
//! - `cycles` = 1 instruction;
//! - `ticks` of the virtual counter (CNTVCT_EL0 at CNTFRQ_EL0 = `freq`) = 1e9 / freq ns
//!   = 1e9 / freq instructions: 16 on QEMU `virt` (62.5 MHz), which is also the resolution.
//!
//! Without icount the cycle counter follows the same virtual clock at QEMU's nominal 1 GHz, so
//! `cycles` = 1 ns of (host-paced, noisy) time, and `ticks` = 1e9 / freq ns.

use crate::parse::{RawResult, Unit};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

pub use crate::catalog::Mode;

/// One benchmark's figures in instructions or ns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    pub name: String,
    pub mode: Mode,
    /// The counter vmbench used.
    pub raw_unit: Unit,
    /// Instructions (or ns) per raw count; also the resolution of the figures.
    pub scale: f64,
    pub n: u64,
    pub min: f64,
    pub median: f64,
    pub mean: f64,
    pub max: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub exits_per_op: Option<f64>,
}

/// The size of one raw count: `freq` is the virtual counter's frequency, CNTFRQ_EL0
/// (`parse::Boot::tick_freq`; needed for `ticks` only).
pub fn scale(unit: Unit, freq: Option<u64>) -> Result<f64> {
    match unit {
        Unit::Cycles => Ok(1.0),
        Unit::Ticks => match freq {
            Some(f) if f > 0 => Ok(1e9 / f as f64),
            _ => bail!("a result in ticks but no counter frequency (no vmbench boot line)"),
        },
    }
}

pub fn convert(r: &RawResult, freq: Option<u64>, mode: Mode) -> Result<Figure> {
    let s = scale(r.unit, freq)?;
    Ok(Figure {
        name: r.name.clone(),
        mode,
        raw_unit: r.unit,
        scale: s,
        n: r.n,
        min: r.min as f64 * s,
        median: r.median as f64 * s,
        mean: r.mean * s,
        max: r.max as f64 * s,
        exits_per_op: r.exits_per_op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(unit: Unit) -> RawResult {
        RawResult {
            name: "ipi".into(),
            unit,
            n: 10,
            min: 40,
            median: 44,
            mean: 44.5,
            max: 71,
            exits_per_op: None,
        }
    }

    #[test]
    fn cycles_are_instructions() {
        let f = convert(&raw(Unit::Cycles), None, Mode::Icount).unwrap();
        assert_eq!((f.min, f.median, f.mean, f.max, f.scale), (40.0, 44.0, 44.5, 71.0, 1.0));
    }

    #[test]
    fn ticks_are_16_instructions_on_virt() {
        let f = convert(&raw(Unit::Ticks), Some(62_500_000), Mode::Icount).unwrap();
        assert_eq!(f.scale, 16.0);
        assert_eq!((f.min, f.median, f.mean, f.max), (640.0, 704.0, 712.0, 1136.0));
        // Wall clock: the same scale, in ns.
        let w = convert(&raw(Unit::Ticks), Some(62_500_000), Mode::WallClock).unwrap();
        assert_eq!(w.median, 704.0);
        assert_eq!(w.mode.unit_label(), "ns");
    }

    #[test]
    fn ticks_need_a_frequency() {
        assert!(convert(&raw(Unit::Ticks), None, Mode::Icount).is_err());
        assert!(convert(&raw(Unit::Ticks), Some(0), Mode::Icount).is_err());
    }
}
