//! The strftime subset nsq_to_file's `--datetime-format` takes (NSQ's `strftime.go`): `%Y %y
//! %m %d %H %I %M %S %p %B %b %A %a %Z %z %%`, in local time. Any other `%x` and every other
//! character is copied as it is.
//!
//! Invariant: the output depends only on the format and the [`Tm`] given, so the filename of a
//! message is a pure function of its time (tests pass a fixed [`Tm`]).

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// A broken-down local time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tm {
    pub year: i32,
    /// 1 ..= 12
    pub month: u32,
    /// 1 ..= 31
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday
    pub weekday: u32,
    /// Seconds east of UTC.
    pub utc_offset: i64,
    /// The zone's abbreviation (`UTC`, `CET`).
    pub zone: String,
}

impl Tm {
    /// Now, in the process's local time zone (`TZ`, `/etc/localtime`), as Go's `time.Now()`.
    pub fn now_local() -> Tm {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as libc::time_t);
        // SAFETY: an all-zero `tm` is a valid value (integers and a null pointer).
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live locals; localtime_r is the thread-safe variant.
        let ok = unsafe { !libc::localtime_r(&now, &mut tm).is_null() };
        if !ok {
            #[allow(clippy::unnecessary_cast)] // time_t is not i64 everywhere
            return Tm::utc_epoch(now as i64);
        }
        let zone = if tm.tm_zone.is_null() {
            String::new()
        } else {
            // SAFETY: tm_zone points to a NUL-terminated string owned by libc's zone data,
            // valid while the zone is not changed (we copy it at once).
            unsafe { std::ffi::CStr::from_ptr(tm.tm_zone) }
                .to_string_lossy()
                .into_owned()
        };
        Tm {
            year: tm.tm_year + 1900,
            month: (tm.tm_mon + 1) as u32,
            day: tm.tm_mday as u32,
            hour: tm.tm_hour as u32,
            minute: tm.tm_min as u32,
            second: tm.tm_sec as u32,
            weekday: tm.tm_wday as u32,
            utc_offset: tm.tm_gmtoff,
            zone,
        }
    }

    /// Only used when the C library cannot convert: the time in UTC, from the day count.
    fn utc_epoch(secs: i64) -> Tm {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        // Civil-from-days (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
        Tm {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            weekday: (days + 4).rem_euclid(7) as u32,
            utc_offset: 0,
            zone: "UTC".into(),
        }
    }
}

/// `format` with each known `%x` replaced from `t`.
pub fn strftime(format: &str, t: &Tm) -> String {
    let mut out = String::with_capacity(format.len() + 8);
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(&spec) = chars.peek() else {
            out.push('%');
            break;
        };
        if expand(spec, t, &mut out) {
            chars.next();
        } else {
            out.push('%');
        }
    }
    out
}

/// Appends the expansion of `%spec`; false for a letter NSQ does not know.
fn expand(spec: char, t: &Tm, out: &mut String) -> bool {
    use std::fmt::Write;
    let hour12 = match t.hour % 12 {
        0 => 12,
        h => h,
    };
    let month = MONTHS[(t.month.clamp(1, 12) - 1) as usize];
    let weekday = WEEKDAYS[(t.weekday % 7) as usize];
    let _ = match spec {
        'Y' => write!(out, "{:04}", t.year),
        'y' => write!(out, "{:02}", t.year.rem_euclid(100)),
        'm' => write!(out, "{:02}", t.month),
        'd' => write!(out, "{:02}", t.day),
        'H' => write!(out, "{:02}", t.hour),
        'I' => write!(out, "{hour12:02}"),
        'M' => write!(out, "{:02}", t.minute),
        'S' => write!(out, "{:02}", t.second),
        'p' => out.write_str(if t.hour < 12 { "AM" } else { "PM" }),
        'B' => out.write_str(month),
        'b' => out.write_str(&month[..3]),
        'A' => out.write_str(weekday),
        'a' => out.write_str(&weekday[..3]),
        'Z' => out.write_str(&t.zone),
        'z' => {
            let sign = if t.utc_offset < 0 { '-' } else { '+' };
            let off = t.utc_offset.abs();
            write!(out, "{sign}{:02}{:02}", off / 3600, off % 3600 / 60)
        }
        '%' => out.write_str("%"),
        _ => return false,
    };
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tm {
        Tm {
            year: 2026,
            month: 3,
            day: 7,
            hour: 15,
            minute: 4,
            second: 5,
            weekday: 6,
            utc_offset: -(7 * 3600),
            zone: "MST".into(),
        }
    }

    #[test]
    fn nsq_default_format() {
        assert_eq!(strftime("%Y-%m-%d_%H", &sample()), "2026-03-07_15");
    }

    #[test]
    fn every_supported_directive() {
        assert_eq!(
            strftime("%Y %y %m %d %H %I %M %S %p %B %b %A %a %Z %z %%", &sample()),
            "2026 26 03 07 15 03 04 05 PM March Mar Saturday Sat MST -0700 %"
        );
        let mut midnight = sample();
        midnight.hour = 0;
        midnight.utc_offset = 5 * 3600 + 30 * 60;
        assert_eq!(strftime("%I%p %z", &midnight), "12AM +0530");
    }

    #[test]
    fn unknown_directives_and_a_trailing_percent_stay() {
        assert_eq!(strftime("a%qb%", &sample()), "a%qb%");
        assert_eq!(strftime("plain", &sample()), "plain");
    }

    #[test]
    fn utc_fallback_converts_days() {
        let t = Tm::utc_epoch(1_772_895_845); // 2026-03-07T15:04:05Z, a Saturday
        assert_eq!(
            (t.year, t.month, t.day, t.hour, t.minute, t.second, t.weekday),
            (2026, 3, 7, 15, 4, 5, 6)
        );
        assert_eq!(Tm::utc_epoch(0).weekday, 4);
    }

    #[test]
    fn now_is_plausible() {
        let t = Tm::now_local();
        assert!(t.year >= 2024 && (1..=12).contains(&t.month) && (1..=31).contains(&t.day));
    }
}
