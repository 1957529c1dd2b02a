//! RFC 3339 times, as replay takes and shows them (`POST /channel/rewind?timestamp=`, the
//! history named in its refusal): [`parse`] to nanoseconds since the Unix epoch and [`format`]
//! back, in UTC. No time zone database: an RFC 3339 time carries its offset.
//!
//! Invariant: `parse(&format(ns)) == Ok(ns)` for every `ns >= 0` (1970 to 2262).

const NS: i64 = 1_000_000_000;

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (`civil_from_days`).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn digits(s: &str, what: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad {what} {s:?}"));
    }
    s.parse().map_err(|_| format!("bad {what} {s:?}"))
}

/// `2026-11-26T07:00:00Z`, `2026-11-26T08:00:00.5+01:00` (a lower-case `t`/`z` too) as
/// nanoseconds since the epoch.
pub fn parse(s: &str) -> Result<i64, String> {
    let b = s.as_bytes();
    let sep = |i: usize, c: u8| b.get(i).is_some_and(|&x| x == c);
    if b.len() < 20
        || !sep(4, b'-')
        || !sep(7, b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || !sep(13, b':')
        || !sep(16, b':')
        || !s.is_char_boundary(19)
    {
        return Err("not an RFC 3339 time (2006-01-02T15:04:05Z)".into());
    }
    let (y, mo, d) = (
        digits(&s[0..4], "year")?,
        digits(&s[5..7], "month")?,
        digits(&s[8..10], "day")?,
    );
    let (h, mi, sec) = (
        digits(&s[11..13], "hour")?,
        digits(&s[14..16], "minute")?,
        digits(&s[17..19], "second")?,
    );
    let month_days = [
        31,
        28 + i64::from(y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d < 1 || d > month_days[(mo - 1) as usize] {
        return Err(format!("no such date {}", &s[0..10]));
    }
    if h > 23 || mi > 59 || sec > 60 {
        return Err(format!("no such time of day {}", &s[11..19]));
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0;
    if let Some(f) = rest.strip_prefix('.') {
        let n = f.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return Err("a '.' with no fraction of a second".into());
        }
        let kept = &f[..n.min(9)];
        frac_ns = digits(kept, "fraction")? * 10i64.pow(9 - kept.len() as u32);
        rest = &f[n..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) && &o[3..4] == ":" => {
            let oh = digits(&o[1..3], "offset hour")?;
            let om = digits(&o[4..6], "offset minute")?;
            if oh > 23 || om > 59 {
                return Err(format!("bad offset {o}"));
            }
            let secs = oh * 3600 + om * 60;
            if o.starts_with('-') {
                -secs
            } else {
                secs
            }
        }
        o => return Err(format!("bad offset {o:?} (Z or +hh:mm)")),
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec.min(59) - offset;
    secs.checked_mul(NS)
        .and_then(|n| n.checked_add(frac_ns))
        .ok_or_else(|| "time out of range".into())
}

/// `ns` since the epoch as RFC 3339 in UTC, with the fraction of a second when there is one.
pub fn format(ns: i64) -> String {
    let (secs, frac) = (ns.div_euclid(NS), ns.rem_euclid(NS));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s) = (sod / 3600, sod % 3600 / 60, sod % 60);
    let mut out = format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    if frac != 0 {
        let f = format!("{frac:09}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_times() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse("2026-11-26T07:00:00Z"), Ok(1_795_676_400 * NS));
        assert_eq!(parse("2026-11-26T08:00:00+01:00"), Ok(1_795_676_400 * NS));
        assert_eq!(
            parse("2026-11-26t07:00:00.25z"),
            Ok(1_795_676_400 * NS + NS / 4)
        );
        assert_eq!(format(1_795_676_400 * NS), "2026-11-26T07:00:00Z");
        assert_eq!(
            format(1_795_676_400 * NS + 1),
            "2026-11-26T07:00:00.000000001Z"
        );
        assert_eq!(format(0), "1970-01-01T00:00:00Z");
        for bad in [
            "",
            "2026-11-26",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-11-26T07:00:00",
            "2026-11-26T07:00:00+1",
            "2026-11-26T25:00:00Z",
            "2026-11-26T07:00:00.Z",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trip() {
        let mut ns: i64 = 0x5DEE_CE66;
        for _ in 0..10_000 {
            ns = ns.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let t = ns.rem_euclid(i64::MAX);
            assert_eq!(parse(&format(t)), Ok(t), "{}", format(t));
        }
    }
}
