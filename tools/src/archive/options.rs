//! nsq_to_file's command line: every flag of NSQ 1.3's nsq_to_file, its defaults, and its
//! checks in its order and words (`log.Fatal`: status 1). Parsing errors (an unknown flag, a
//! value of the wrong type) are clap's, status 2.
//!
//! Beyond NSQ (issue 27): `--compress gzip|zstd` (`gzip` is `--gzip`) and `--zstd-level`. The
//! zstd level is its own flag rather than `--gzip-level` reused: zstd's scale is 1-22 with 3 as
//! its default, gzip's 1-9 with 6, so one flag would either cap zstd or change NSQ's default.

use crate::cli::{go_bool, go_duration};
use crate::cli::{ConsumerFlags, StatsFlag, VersionFlag};
use crate::start::ToolOptions;
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "nsq_to_file",
    about = "Writes the messages of NSQ topics to files, rotating them (NSQ's nsq_to_file)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Options {
    #[command(flatten)]
    pub v: VersionFlag,
    /// set log verbosity: debug, info, warn, error, or fatal
    #[arg(long = "log-level", default_value = "info", value_parser = nsq_common::cli::parse_log_level)]
    pub log_level: tracing::Level,
    /// log message prefix (accepted for NSQ's command lines; the log format is tracing's)
    #[arg(long = "log-prefix", default_value = "[nsq_to_file] ")]
    pub log_prefix: String,
    /// nsq channel
    #[arg(long, default_value = "nsq_to_file")]
    pub channel: String,
    /// directory to write output files to
    #[arg(long = "output-dir", default_value = "/tmp")]
    pub output_dir: PathBuf,
    /// directory for in-progress files before moving to output-dir
    #[arg(long = "work-dir", default_value = "")]
    pub work_dir_arg: String,
    /// `--work-dir`, or the output dir when not given (set by [`Options::check`]).
    #[arg(skip)]
    pub work_dir: PathBuf,
    /// strftime compatible format for <DATETIME> in filename format
    #[arg(long = "datetime-format", default_value = "%Y-%m-%d_%H")]
    pub datetime_format: String,
    /// output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are replaced. <REV> is
    /// increased when file already exists)
    #[arg(
        long = "filename-format",
        default_value = "<TOPIC>.<HOST><REV>.<DATETIME>.log"
    )]
    pub filename_format: String,
    /// value to output in log filename in place of hostname. <SHORT_HOST> and <HOSTNAME> are
    /// valid replacement tokens
    #[arg(long = "host-identifier", default_value = "")]
    pub host_identifier: String,
    /// gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)
    #[arg(
        long = "gzip-level",
        default_value_t = 6,
        allow_negative_numbers = true
    )]
    pub gzip_level: i64,
    /// gzip output files.
    #[arg(long, value_parser = go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub gzip: bool,
    /// compress output files: gzip (the same as --gzip) or zstd (not in NSQ)
    #[arg(long, default_value = "")]
    pub compress: String,
    /// zstd compression level with --compress zstd (1-22; not in NSQ)
    #[arg(
        long = "zstd-level",
        default_value_t = 3,
        allow_negative_numbers = true
    )]
    pub zstd_level: i64,
    /// skip writing empty files
    #[arg(long = "skip-empty-files", value_parser = go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub skip_empty_files: bool,
    /// how frequently the topic list should be refreshed
    #[arg(long = "topic-refresh", value_parser = go_duration, default_value = "1m")]
    pub topic_refresh: Duration,
    /// only log topics matching the following pattern
    #[arg(long = "topic-pattern", default_value = "")]
    pub topic_pattern: String,
    /// rotate the file when it grows bigger than `rotate-size` bytes
    #[arg(
        long = "rotate-size",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub rotate_size: i64,
    /// rotate the file every duration
    #[arg(long = "rotate-interval", value_parser = go_duration, default_value = "0")]
    pub rotate_interval: Duration,
    /// sync file to disk every duration
    #[arg(long = "sync-interval", value_parser = go_duration, default_value = "30s")]
    pub sync_interval: Duration,
    /// timeout for HTTP connect
    #[arg(long = "http-client-connect-timeout", value_parser = go_duration, default_value = "2s")]
    pub http_client_connect_timeout: Duration,
    /// timeout for HTTP request
    #[arg(long = "http-client-request-timeout", value_parser = go_duration, default_value = "5s")]
    pub http_client_request_timeout: Duration,
    /// nsq topic (may be given multiple times)
    #[arg(long)]
    pub topic: Vec<String>,
    #[command(flatten)]
    pub consumer: ConsumerFlags,
    #[command(flatten)]
    pub stats: StatsFlag,
}

impl ToolOptions for Options {
    fn version(&self) -> bool {
        self.v.version
    }

    fn log_level(&self) -> tracing::Level {
        self.log_level
    }
}

impl Options {
    /// NSQ's checks after parsing, in its order; the error is its message. Fills in the work
    /// dir (the output dir when not given).
    pub fn check(&mut self) -> Result<(), String> {
        if self.channel.is_empty() {
            return Err("--channel is required".into());
        }
        if self.http_client_connect_timeout.is_zero() {
            return Err("--http-client-connect-timeout should be positive".into());
        }
        if self.http_client_request_timeout.is_zero() {
            return Err("--http-client-request-timeout should be positive".into());
        }
        if self.consumer.nsqd_tcp_address.is_empty()
            && self.consumer.lookupd_http_address.is_empty()
        {
            return Err("--nsqd-tcp-address or --lookupd-http-address required.".into());
        }
        if !self.consumer.nsqd_tcp_address.is_empty()
            && !self.consumer.lookupd_http_address.is_empty()
        {
            return Err("use --nsqd-tcp-address or --lookupd-http-address not both".into());
        }
        if !(1..=9).contains(&self.gzip_level) {
            return Err(format!(
                "invalid --gzip-level value ({}), should be 1-9",
                self.gzip_level
            ));
        }
        match self.compress.as_str() {
            "" | "none" => {}
            "gzip" => self.gzip = true,
            "zstd" if self.gzip => {
                return Err("use --gzip or --compress zstd, not both".into());
            }
            "zstd" => {}
            other => {
                return Err(format!(
                    "invalid --compress value ({other}), should be gzip or zstd"
                ));
            }
        }
        if !(1..=22).contains(&self.zstd_level) {
            return Err(format!(
                "invalid --zstd-level value ({}), should be 1-22",
                self.zstd_level
            ));
        }
        if self.topic.is_empty() && self.topic_pattern.is_empty() {
            return Err("--topic or --topic-pattern required".into());
        }
        if self.topic.is_empty() && self.consumer.lookupd_http_address.is_empty() {
            return Err(
                "--lookupd-http-address must be specified when no --topic specified".into(),
            );
        }
        // Go's time.NewTicker panics on these; a message is kinder.
        if self.sync_interval.is_zero() {
            return Err("--sync-interval should be positive".into());
        }
        if self.topic.is_empty() && self.topic_refresh.is_zero() {
            return Err("--topic-refresh should be positive".into());
        }
        if self.consumer.max_in_flight == 0 {
            return Err("--max-in-flight should be positive".into());
        }
        if let Err(e) = regex::Regex::new(&self.topic_pattern) {
            return Err(format!("invalid --topic-pattern: {e}"));
        }
        self.work_dir = if self.work_dir_arg.is_empty() {
            self.output_dir.clone()
        } else {
            PathBuf::from(&self.work_dir_arg)
        };
        Ok(())
    }

    /// Makes the output and work directories if missing (NSQ makes them as it opens a file)
    /// and checks that files can be made in them, so that a wrong directory stops the tool at
    /// start-up with the flag and the path named, before any message is taken. After
    /// [`Options::check`].
    pub fn prepare_dirs(&self) -> Result<(), String> {
        let mut dirs = vec![("--output-dir", &self.output_dir)];
        if self.separate_work_dir() {
            dirs.push(("--work-dir", &self.work_dir));
        }
        for (flag, dir) in dirs {
            let shown = dir.display();
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("{flag} {shown}: cannot create the directory: {e}"))?;
            if !dir.is_dir() {
                return Err(format!("{flag} {shown}: not a directory"));
            }
            let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
                .map_err(|_| format!("{flag} {shown}: the path holds a NUL byte"))?;
            // SAFETY: access reads the NUL-terminated path we pass.
            if unsafe { libc::access(path.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("{flag} {shown}: cannot make files in it: {e}"));
            }
        }
        Ok(())
    }

    /// True when in-progress files live apart from finished ones.
    pub fn separate_work_dir(&self) -> bool {
        self.work_dir != self.output_dir
    }

    /// The output files' compression (after [`Options::check`]).
    pub fn compression(&self) -> Compression {
        if self.gzip {
            Compression::Gzip(self.gzip_level.clamp(1, 9) as u32)
        } else if self.compress == "zstd" {
            Compression::Zstd(self.zstd_level.clamp(1, 22) as i32)
        } else {
            Compression::None
        }
    }

    /// Rotation by size or by time is on.
    pub fn rotating(&self) -> bool {
        self.rotate_size > 0 || !self.rotate_interval.is_zero()
    }
}

/// How output files are compressed, with the level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    /// gzip members at a level of 1-9.
    Gzip(u32),
    /// zstd frames at a level of 1-22.
    Zstd(i32),
}

impl Compression {
    /// The extension a compressed file's name ends in (NSQ's `.gz`; `.zst` as the zstd tool).
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip(_) => ".gz",
            Compression::Zstd(_) => ".zst",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        let argv =
            std::iter::once("nsq_to_file".to_string()).chain(args.iter().map(|s| s.to_string()));
        let argv = nsq_common::cli::go_style_flags::<Options, _>(argv);
        let mut o = Options::try_parse_from(argv).map_err(|e| e.to_string())?;
        o.check()?;
        Ok(o)
    }

    #[test]
    fn defaults_are_nsqs() {
        let o = parse(&["--topic", "t", "--nsqd-tcp-address", "h:1"]).expect("valid");
        assert_eq!(o.channel, "nsq_to_file");
        assert_eq!(o.consumer.max_in_flight, 200);
        assert_eq!(o.output_dir, PathBuf::from("/tmp"));
        assert_eq!(o.work_dir, o.output_dir);
        assert_eq!(o.sync_interval, Duration::from_secs(30));
        assert_eq!(o.topic_refresh, Duration::from_secs(60));
        assert_eq!(o.gzip_level, 6);
        assert!(!o.gzip && !o.skip_empty_files);
        assert_eq!(o.compression(), Compression::None);
    }

    #[test]
    fn compress_gzip_is_gzip_and_zstd_has_its_level() {
        let base = ["--topic", "t", "--nsqd-tcp-address", "h:1"];
        let with = |extra: &[&str]| parse(&[&base[..], extra].concat()).expect("valid");
        let o = with(&["--compress", "gzip", "--gzip-level", "9"]);
        assert!(o.gzip);
        assert_eq!(o.compression(), Compression::Gzip(9));
        assert_eq!(o.compression().extension(), ".gz");
        let o = with(&["--compress=zstd"]);
        assert_eq!(o.compression(), Compression::Zstd(3));
        assert_eq!(o.compression().extension(), ".zst");
        let o = with(&["-compress", "zstd", "-zstd-level=19"]);
        assert_eq!(o.compression(), Compression::Zstd(19));
    }

    #[test]
    fn go_forms_and_repeats() {
        let o = parse(&[
            "-topic=a",
            "-topic",
            "b",
            "-nsqd-tcp-address=h:1",
            "-gzip",
            "-skip-empty-files=false",
            "-rotate-interval=1m",
            "-channel=x",
            "-channel=y",
        ])
        .expect("valid");
        assert_eq!(o.topic, ["a", "b"]);
        assert!(o.gzip && !o.skip_empty_files);
        assert_eq!(o.channel, "y", "the last value wins, as in Go");
        assert_eq!(o.rotate_interval, Duration::from_secs(60));
    }

    #[test]
    fn nsq_checks_and_messages() {
        let err = |a: &[&str]| parse(a).expect_err("refused");
        assert!(err(&["--topic", "t"])
            .contains("--nsqd-tcp-address or --lookupd-http-address required"));
        assert!(err(&[
            "--topic",
            "t",
            "--nsqd-tcp-address",
            "a",
            "--lookupd-http-address",
            "b"
        ])
        .contains("not both"));
        assert!(err(&[
            "--topic",
            "t",
            "--nsqd-tcp-address",
            "a",
            "--gzip-level",
            "0"
        ])
        .contains("invalid --gzip-level value (0), should be 1-9"));
        assert!(err(&["--nsqd-tcp-address", "a"]).contains("--topic or --topic-pattern required"));
        let base = ["--topic", "t", "--nsqd-tcp-address", "a"];
        let with = |extra: &[&'static str]| [&base[..], extra].concat();
        assert!(err(&with(&["--compress", "lz4"]))
            .contains("invalid --compress value (lz4), should be gzip or zstd"));
        assert!(err(&with(&["--gzip", "--compress", "zstd"])).contains("not both"));
        assert!(err(&with(&["--compress", "zstd", "--zstd-level", "23"]))
            .contains("invalid --zstd-level value (23), should be 1-22"));
        assert!(err(&["--topic-pattern", "x", "--nsqd-tcp-address", "a"])
            .contains("--lookupd-http-address must be specified"));
        assert!(err(&[
            "--topic",
            "t",
            "--nsqd-tcp-address",
            "a",
            "--sync-interval",
            "10"
        ])
        .contains("sync-interval"));
        assert!(err(&["--topic", "t", "--nsqd-tcp-address", "a", "--bogus"]).contains("--bogus"));
    }
}
