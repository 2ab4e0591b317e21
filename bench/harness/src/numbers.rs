//! How figures are written in the reports and on the terminal.

/// `1234.4` -> `1,234`.
pub fn int(v: f64) -> String {
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// An integer as an integer, anything else with one decimal (vmbench's means).
pub fn num(v: f64) -> String {
    if v < 0.0 {
        return format!("-{}", num(-v));
    }
    let tenths = (v * 10.0).round();
    if tenths % 10.0 == 0.0 {
        int(v)
    } else {
        format!("{}.{}", int((tenths / 10.0).trunc()), tenths as i64 % 10)
    }
}

/// `0.055` -> `+5.5 %`.
pub fn pct(change: f64) -> String {
    format!("{:+.1} %", change * 100.0)
}

/// A change from `base` to `now`: `+12 (+12.0 %)`, `-10 (-10.0 %)`, `±0`.
pub fn delta(base: f64, now: f64) -> String {
    let d = now - base;
    if d == 0.0 {
        "±0".to_owned()
    } else if base > 0.0 {
        format!("{}{} ({})", if d > 0.0 { "+" } else { "" }, num(d), pct(now / base - 1.0))
    } else {
        format!("{}{}", if d > 0.0 { "+" } else { "" }, num(d))
    }
}

/// A workload's figure: three significant digits or so.
pub fn figure(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        int(v)
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(int(0.0), "0");
        assert_eq!(int(999.0), "999");
        assert_eq!(int(1000.0), "1,000");
        assert_eq!(int(1234567.4), "1,234,567");
        assert_eq!(int(-1500.0), "-1,500");
        assert_eq!(num(96.0), "96");
        assert_eq!(num(96.4), "96.4");
        assert_eq!(num(1234.5), "1,234.5");
        assert_eq!(num(99.96), "100");
        assert_eq!(num(-0.5), "-0.5");
        assert_eq!(num(16.04), "16");
        assert_eq!(pct(0.055), "+5.5 %");
        assert_eq!(pct(-0.1), "-10.0 %");
        assert_eq!(figure(1234.0), "1,234");
        assert_eq!(figure(30.84), "30.8");
        assert_eq!(figure(2.876), "2.88");
        assert_eq!(delta(100.0, 112.0), "+12 (+12.0 %)");
        assert_eq!(delta(100.0, 90.0), "-10 (-10.0 %)");
        assert_eq!(delta(100.0, 100.0), "±0");
        assert_eq!(delta(0.0, 2.0), "+2");
    }
}
