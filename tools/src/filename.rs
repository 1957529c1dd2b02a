//! nsq_to_file's file names (NSQ's `computeFilenameFormat` and `<REV>` handling).
//!
//! `--filename-format` has five fields: `<TOPIC>`, `<HOST>` (the short host name, or
//! `--host-identifier` with its own `<SHORT_HOST>` / `<HOSTNAME>` fields), `<PID>`, all fixed
//! once per topic ([`FilenameFormat::new`]); `<DATETIME>` (`--datetime-format` of the current
//! local time, [`FilenameFormat::name_at`]); and `<REV>` (`-000000`, `-000001`, ... so that a
//! new file never reuses a name, [`with_rev`]).
//!
//! Invariants, as in NSQ: `<REV>` is required when compression (gzip or zstd), rotation or a
//! separate work dir is on (else files would collide), and removed otherwise; a compressed
//! file's name ends in its extension (`.gz` as NSQ, `.zst` for zstd).

use crate::strftime::{strftime, Tm};
use regex::Regex;

/// What the format needs from the options.
#[derive(Debug, Clone)]
pub struct FormatOptions<'a> {
    pub filename_format: &'a str,
    pub host_identifier: &'a str,
    pub datetime_format: &'a str,
    /// The compressed files' extension (`.gz`, `.zst`), empty when not compressing.
    pub compressed_ext: &'a str,
    pub rotating: bool,
    pub separate_work_dir: bool,
}

/// A topic's file name with `<TOPIC>`, `<HOST>` and `<PID>` filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilenameFormat {
    /// Still holds `<DATETIME>` and (when needed) `<REV>`.
    pub template: String,
    /// The same with `<PID>` left in, for [`FilenameFormat::leftover_pattern`].
    any_pid: String,
    datetime_format: String,
}

impl FilenameFormat {
    /// NSQ's rules for `topic` on host `hostname` in process `pid`.
    pub fn new(
        opts: &FormatOptions<'_>,
        topic: &str,
        hostname: &str,
        pid: u32,
    ) -> Result<FilenameFormat, String> {
        let short = hostname.split('.').next().unwrap_or(hostname);
        let identifier = if opts.host_identifier.is_empty() {
            short.to_string()
        } else {
            opts.host_identifier
                .replace("<SHORT_HOST>", short)
                .replace("<HOSTNAME>", hostname)
        };
        let mut t = opts.filename_format.to_string();
        if !opts.compressed_ext.is_empty() || opts.rotating || opts.separate_work_dir {
            if !t.contains("<REV>") {
                return Err(
                    "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
                        .into(),
                );
            }
        } else {
            t = t.replace("<REV>", "");
        }
        t = t.replace("<TOPIC>", topic).replace("<HOST>", &identifier);
        if !t.ends_with(opts.compressed_ext) {
            t.push_str(opts.compressed_ext);
        }
        Ok(FilenameFormat {
            template: t.replace("<PID>", &pid.to_string()),
            any_pid: t,
            datetime_format: opts.datetime_format.to_string(),
        })
    }

    /// The name (relative to the work or output dir) at time `t`, `<REV>` still in it.
    pub fn name_at(&self, t: &Tm) -> String {
        self.template
            .replace("<DATETIME>", &strftime(&self.datetime_format, t))
    }

    /// A pattern matching every name this format gives, whatever the time, revision and
    /// process id (`<PID>` was filled in, so any number stands in for it): how files left in
    /// the work dir by an earlier run of the same topic are recognised.
    pub fn leftover_pattern(&self) -> Regex {
        let mut pattern = String::from("^");
        let mut rest = self.any_pid.as_str();
        while !rest.is_empty() {
            let next = [
                ("<DATETIME>", ".*"),
                ("<REV>", "(-[0-9]{6})?"),
                ("<PID>", "[0-9]+"),
            ]
            .iter()
            .filter_map(|(field, re)| rest.find(field).map(|at| (at, *field, *re)))
            .min_by_key(|(at, _, _)| *at);
            match next {
                Some((at, field, re)) => {
                    pattern.push_str(&regex::escape(&rest[..at]));
                    pattern.push_str(re);
                    rest = &rest[at + field.len()..];
                }
                None => {
                    pattern.push_str(&regex::escape(rest));
                    rest = "";
                }
            }
        }
        pattern.push('$');
        // Escaped literals and fixed sub-patterns: always a valid regex.
        Regex::new(&pattern).unwrap_or_else(|_| Regex::new("^$").expect("static regex"))
    }
}

/// `name` with `<REV>` as revision `rev` (`-000042`).
pub fn with_rev(name: &str, rev: u32) -> String {
    name.replace("<REV>", &format!("-{rev:06}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tm() -> Tm {
        Tm {
            year: 2026,
            month: 11,
            day: 26,
            hour: 4,
            minute: 0,
            second: 0,
            weekday: 4,
            utc_offset: 0,
            zone: "UTC".into(),
        }
    }

    fn opts(format: &str) -> FormatOptions<'_> {
        FormatOptions {
            filename_format: format,
            host_identifier: "",
            datetime_format: "%Y-%m-%d_%H",
            compressed_ext: "",
            rotating: false,
            separate_work_dir: false,
        }
    }

    const DEFAULT: &str = "<TOPIC>.<HOST><REV>.<DATETIME>.log";

    #[test]
    fn default_format_without_rotation_drops_rev() {
        let f = FilenameFormat::new(&opts(DEFAULT), "events", "box.example.com", 7).expect("ok");
        assert_eq!(f.name_at(&tm()), "events.box.2026-11-26_04.log");
    }

    #[test]
    fn rev_pid_gzip_and_host_identifier() {
        let mut o = opts("<TOPIC>-<PID>.<HOST><REV>.<DATETIME>.log");
        o.compressed_ext = ".gz";
        o.host_identifier = "<SHORT_HOST>/<HOSTNAME>";
        let f = FilenameFormat::new(&o, "t", "box.example.com", 42).expect("ok");
        let name = f.name_at(&tm());
        assert_eq!(name, "t-42.box/box.example.com<REV>.2026-11-26_04.log.gz");
        assert_eq!(
            with_rev(&name, 3),
            "t-42.box/box.example.com-000003.2026-11-26_04.log.gz"
        );
    }

    #[test]
    fn rev_is_required_when_rotating_gzipping_or_with_a_work_dir() {
        for set in [
            |o: &mut FormatOptions| o.compressed_ext = ".gz",
            |o: &mut FormatOptions| o.rotating = true,
            |o: &mut FormatOptions| o.separate_work_dir = true,
        ] {
            let mut o = opts("<TOPIC>.<DATETIME>.log");
            set(&mut o);
            let err = FilenameFormat::new(&o, "t", "h", 1).expect_err("no <REV>");
            assert!(err.contains("missing <REV>"), "{err}");
        }
        let mut o = opts("<TOPIC>.<DATETIME>.gz");
        o.compressed_ext = ".gz";
        o.filename_format = "<TOPIC><REV>.gz";
        let f = FilenameFormat::new(&o, "t", "h", 1).expect("ok");
        assert_eq!(f.name_at(&tm()), "t<REV>.gz", "no second .gz");
        o.compressed_ext = ".zst";
        let f = FilenameFormat::new(&o, "t", "h", 1).expect("ok");
        assert_eq!(f.name_at(&tm()), "t<REV>.gz.zst");
    }

    #[test]
    fn leftovers_of_any_time_rev_and_pid_match() {
        let mut o = opts("<TOPIC>.<PID>.<HOST><REV>.<DATETIME>.log");
        o.rotating = true;
        let f = FilenameFormat::new(&o, "a.b", "h", 99).expect("ok");
        let re = f.leftover_pattern();
        assert!(re.is_match("a.b.1234.h-000002.2020-01-01_00.log"));
        assert!(re.is_match("a.b.99.h-000000.x.log"));
        assert!(!re.is_match("aXb.1.h-000002.2020.log"), "dots are literal");
        assert!(!re.is_match("other.1.h-000002.2020.log"));
    }
}
