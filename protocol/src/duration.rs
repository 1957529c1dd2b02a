//! Go-style durations (`60s`, `250ms`, `1m30s`, `1h`, `1.5s`), as nsqd's flags and its
//! `/config` endpoint take them. A bare integer is read as nanoseconds, like Go's flag values
//! set through JSON; flags that count in milliseconds say so where they are parsed.

use std::time::Duration;

/// Parses a Go duration string. Negative durations are refused: no nsqd setting takes one.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if let Ok(ns) = s.parse::<u64>() {
        return Ok(Duration::from_nanos(ns));
    }
    let mut rest = s;
    let mut total_ns: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        if num_end == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(format!("unknown unit {unit:?} in duration {s:?}")),
        };
        total_ns += value * scale;
    }
    if !total_ns.is_finite() || total_ns > u64::MAX as f64 {
        return Err(format!("duration {s:?} is out of range"));
    }
    Ok(Duration::from_nanos(total_ns.round() as u64))
}

/// Parses a duration given on a command line. Unlike [`parse_duration`], a bare number other
/// than `0` is refused with a hint: `--msg-timeout 60` meant as seconds would otherwise be
/// 60 ns. (Go's flag package refuses it too: "missing unit in duration".)
pub fn parse_flag_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t != "0" && !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{s:?} has no unit; write it like 60s, 250ms or 1m30s"
        ));
    }
    parse_duration(t)
}

/// Formats a duration the way Go prints one (`1m0s`, `250ms`, `2s`), exactly (integer
/// arithmetic, so long durations keep every digit).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", decimal(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", decimal(ns, 1_000_000));
    }
    let h = ns / 3_600_000_000_000;
    let m = (ns / 60_000_000_000) % 60;
    let s_ns = ns % 60_000_000_000;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", decimal(s_ns, 1_000_000_000)));
    out
}

/// `n / unit` as a decimal with trailing zeros trimmed.
fn decimal(n: u128, unit: u128) -> String {
    let whole = n / unit;
    let frac = n % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = unit.ilog10() as usize;
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("60000ms"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").is_ok());
        for bad in ["", "s", "5x", "-1s", "1.2.3s", "ms5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
        assert_eq!(format_duration(Duration::from_secs(3661)), "1h1m1s");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(
            format_duration(Duration::from_nanos(66_547_526)),
            "66.547526ms"
        );
        assert_eq!(format_duration(Duration::from_nanos(1500)), "1.5µs");
        assert_eq!(format_duration(Duration::from_secs(65)), "1m5s");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
    }
}
