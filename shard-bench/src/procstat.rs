//! The broker's cost as the kernel sees it: CPU time from `/proc/PID/stat` (utime + stime,
//! fields 14 and 15, in clock ticks) and memory from `/proc/PID/status` (VmHWM, VmRSS).
//! Works for any broker process, ours or nsqd.

use std::io;

/// user + system CPU seconds used by `pid` so far.
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_ticks(&stat)
        .map(|ticks| ticks as f64 / clock_ticks_per_second())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable /proc/PID/stat"))
}

/// (VmHWM, VmRSS) of `pid`, in kB.
pub fn memory_kb(pid: u32) -> io::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok((
        status_field(&status, "VmHWM:").unwrap_or(0),
        status_field(&status, "VmRSS:").unwrap_or(0),
    ))
}

/// The host's 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// utime + stime from a stat line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn status_field(status: &str, name: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let stat = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 500 0 0 0 150 25 0 0 20 0 3 0 100 1000 200";
        assert_eq!(parse_cpu_ticks(stat), Some(175));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn status_gives_peak_and_current_rss() {
        let status = "Name:\tbroker\nVmHWM:\t  123456 kB\nVmRSS:\t   65432 kB\n";
        assert_eq!(status_field(status, "VmHWM:"), Some(123456));
        assert_eq!(status_field(status, "VmRSS:"), Some(65432));
    }

    #[test]
    fn our_own_process_can_be_measured() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).unwrap() >= 0.0);
        assert!(memory_kb(pid).unwrap().0 > 0);
    }
}
