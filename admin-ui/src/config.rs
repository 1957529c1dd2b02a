//! Command-line flags, with nsqadmin's names and defaults.

use crate::audit::Endpoint;
use crate::cidr::Cidr;
use crate::graphite::{GraphiteSettings, GraphiteUrl};
use crate::tls::TlsFlags;
use crate::upstream::Timeouts;
use crate::warnings::dedup;
use clap::{CommandFactory, Parser};
use serde_json::{Map, Value};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// The flags as clap reads them.
#[derive(Debug, Parser)]
#[command(
    name = "admin-ui",
    version = concat!(env!("CARGO_PKG_VERSION"), " (nsqadmin v1.3.0-compatible)"),
    about = "NSQ-compatible admin web UI (nsqadmin replacement)",
    // As Go's flag package: a flag given twice takes its last value (wrapper scripts append
    // their extra flags to the defaults); list flags still add up.
    args_override_self = true
)]
struct Flags {
    /// <addr>:<port> to listen on for HTTP clients (browsers)
    #[arg(long, default_value = "0.0.0.0:4171", value_parser = listen_addr)]
    http_address: SocketAddr,

    /// lookup HTTP address, host:port (repeatable)
    #[arg(long = "lookupd-http-address", value_parser = upstream_addr)]
    lookupd_http_addresses: Vec<String>,

    /// broker HTTP address, host:port (repeatable)
    #[arg(long = "nsqd-http-address", value_parser = upstream_addr)]
    nsqd_http_addresses: Vec<String>,

    /// a user allowed to take actions (repeatable); when given, actions need one of them named
    /// in --acl-http-header
    #[arg(long = "admin-user")]
    admin_users: Vec<String>,

    /// the header naming the user (set by an authenticating proxy)
    #[arg(long, default_value = "X-Forwarded-User")]
    acl_http_header: String,

    /// http(s)://host:port/path to POST a JSON notification of each action to
    #[arg(long, default_value = "")]
    notification_http_endpoint: String,

    /// log level: debug, info, warn, error or fatal
    #[arg(long, default_value = "info", value_parser = nsq_common::cli::parse_log_level)]
    log_level: tracing::Level,

    /// timeout for HTTP connect (to lookups and brokers)
    #[arg(long, default_value = "2s", value_parser = positive_duration)]
    http_client_connect_timeout: Duration,

    /// timeout for HTTP request: for any one read or write (a whole answer gets 3 times this)
    #[arg(long, default_value = "5s", value_parser = positive_duration)]
    http_client_request_timeout: Duration,

    /// configure the HTTP client to skip verification of TLS certificates
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false",
          default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    http_client_tls_insecure_skip_verify: bool,

    /// path to CA file for the HTTP client
    #[arg(long, default_value = "")]
    http_client_tls_root_ca_file: String,

    /// path to certificate file for the HTTP client
    #[arg(long, default_value = "")]
    http_client_tls_cert: String,

    /// path to key file for the HTTP client
    #[arg(long, default_value = "")]
    http_client_tls_key: String,

    /// path to config file (nsqadmin's TOML keys; flags given here win over the file)
    #[arg(long)]
    config: Option<String>,

    /// log message prefix (accepted for nsqadmin compatibility; log lines carry no prefix)
    #[arg(long, default_value = "[nsqadmin] ")]
    log_prefix: String,

    /// [deprecated] has no effect, use --log-level
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false",
          default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    verbose: bool,

    /// URL base path: pages, static files and the API are served under it
    #[arg(long, default_value = "/")]
    base_path: String,

    /// serve the static files (app.js, style.css, ...) from this directory instead of the
    /// ones built in (development use only)
    #[arg(long, default_value = "")]
    dev_static_dir: String,

    /// graphite HTTP address (http://host:port or https://...): charts and rates from it
    #[arg(long, default_value = "", value_parser = graphite_url)]
    graphite_url: String,

    /// proxy HTTP requests to graphite (GET <base-path>/render)
    #[arg(long, num_args = 0..=1, require_equals = true, default_value = "false",
          default_missing_value = "true", value_parser = go_bool, action = clap::ArgAction::Set)]
    proxy_graphite: bool,

    /// the counter stats key formatting applied by statsd (empty: none)
    #[arg(long, default_value = "stats.counters.%s.count")]
    statsd_counter_format: String,

    /// the gauge stats key formatting applied by statsd (empty: none)
    #[arg(long, default_value = "stats.gauges.%s")]
    statsd_gauge_format: String,

    /// prefix used for keys sent to statsd (%s for host replacement, must match the brokers')
    #[arg(long, default_value = "nsq.%s")]
    statsd_prefix: String,

    /// time interval the brokers push to statsd (must match the brokers')
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    statsd_interval: Duration,

    /// admin-ui's own: how often every node's /stats is sampled for the live rates and
    /// sparklines (GET /api/rates); 0 turns the sampler off
    #[arg(long, default_value = "10s", value_parser = protocol::duration::parse_flag_duration)]
    sample_interval: Duration,

    /// a CIDR from which to allow HTTP requests to the /config endpoint (empty: from anywhere)
    #[arg(long, default_value = "127.0.0.1/8", value_parser = cidr_or_empty)]
    allow_config_from_cidr: CidrFlag,
}

/// `--allow-config-from-cidr`: a CIDR, or empty for anyone.
#[derive(Debug, Clone, Copy)]
struct CidrFlag(Option<Cidr>);

/// The config file keys nsqadmin names differently from its flags (nsqadmin's `cfg` tags).
const RENAMED_KEYS: &[(&str, &str)] = &[
    ("nsqlookupd_http_addresses", "lookupd-http-address"),
    ("nsqd_http_addresses", "nsqd-http-address"),
    ("admin_users", "admin-user"),
];

/// The settings, checked.
#[derive(Debug, Clone)]
pub struct Config {
    pub http_address: SocketAddr,
    /// Lookups, `host:port` of their HTTP APIs.
    pub lookups: Vec<String>,
    /// Brokers read besides (or without) the lookups' producers, `host:port` of their HTTP APIs.
    pub brokers: Vec<String>,
    pub admin_users: Vec<String>,
    pub acl_http_header: String,
    pub notification_http_endpoint: Option<Endpoint>,
    pub log_level: tracing::Level,
    /// How to talk to brokers that serve HTTPS only.
    pub tls: TlsFlags,
    pub timeouts: Timeouts,
    /// `--base-path` normalised: empty for `/`, else `/a/b` (a leading slash, none trailing).
    pub base_path: String,
    pub dev_static_dir: Option<PathBuf>,
    pub graphite: GraphiteSettings,
    /// Who may use `/config` (`None`: anyone).
    pub allow_config_from: Option<Cidr>,
    /// nsqadmin flags given that have no effect here, each with why (logged at start-up).
    pub without_effect: Vec<String>,
    /// Every option by its config-file name, as nsqadmin's `/config/:opt` answers it.
    pub options: Map<String, Value>,
    /// `--sample-interval` (admin-ui's): zero when the rates sampler is off.
    pub sample_interval: Duration,
}

impl Config {
    /// Reads the flags from `args` (the first item is the program name). On a bad flag, on
    /// neither a lookup nor a broker given, or on `--help` / `--version`, returns clap's error,
    /// which prints itself and knows its exit code.
    pub fn from_args<I>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = String>,
    {
        let args = nsq_common::cli::go_style_flags::<Flags, _>(args);
        let args = nsq_common::config_file::with_config_file::<Flags>(args, RENAMED_KEYS).map_err(
            |e| Flags::command().error(clap::error::ErrorKind::InvalidValue, e.to_string()),
        )?;
        let flags = Flags::try_parse_from(args)?;
        if flags.lookupd_http_addresses.is_empty() && flags.nsqd_http_addresses.is_empty() {
            return Err(missing(
                "give at least one --lookupd-http-address or --nsqd-http-address",
            ));
        }
        let options = options_of(&flags);
        // An empty path or URL (nsqadmin's example config has them) is none.
        let some_path = |p: &str| (!p.is_empty()).then(|| PathBuf::from(p));
        let notify = match flags.notification_http_endpoint.as_str() {
            "" => None,
            url => Some(Endpoint::parse(url).map_err(|e| {
                Flags::command().error(
                    clap::error::ErrorKind::InvalidValue,
                    format!("--notification-http-endpoint: {e}"),
                )
            })?),
        };
        let cert_and_key = match (
            some_path(&flags.http_client_tls_cert),
            some_path(&flags.http_client_tls_key),
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(missing(
                    "--http-client-tls-key must be specified with --http-client-tls-cert",
                ))
            }
            (None, Some(_)) => {
                return Err(missing(
                    "--http-client-tls-cert must be specified with --http-client-tls-key",
                ))
            }
        };
        let mut without_effect = Vec::new();
        if flags.log_prefix != "[nsqadmin] " {
            without_effect.push("--log-prefix: log lines carry no prefix".to_string());
        }
        if flags.verbose {
            without_effect.push("--verbose: deprecated in nsqadmin, use --log-level".to_string());
        }
        let graphite_url = match flags.graphite_url.as_str() {
            "" => None,
            url => Some(GraphiteUrl::parse(url).map_err(|e| {
                Flags::command().error(
                    clap::error::ErrorKind::InvalidValue,
                    format!("failed to parse --graphite-url ({url}) - {e}"),
                )
            })?),
        };
        if flags.proxy_graphite && graphite_url.is_none() {
            // nsqadmin starts too (its proxy then has nowhere to go).
            without_effect.push(
                "--proxy-graphite: no --graphite-url to proxy to (GET /render answers 404)"
                    .to_string(),
            );
        }
        Ok(Config {
            base_path: normalize_base_path(&flags.base_path),
            dev_static_dir: some_path(&flags.dev_static_dir),
            graphite: GraphiteSettings {
                url: graphite_url,
                proxy: flags.proxy_graphite,
                statsd_prefix: flags.statsd_prefix,
                statsd_counter_format: flags.statsd_counter_format,
                statsd_gauge_format: flags.statsd_gauge_format,
                statsd_interval: flags.statsd_interval,
            },
            allow_config_from: flags.allow_config_from_cidr.0,
            sample_interval: flags.sample_interval,
            without_effect,
            options,
            http_address: flags.http_address,
            lookups: dedup(flags.lookupd_http_addresses),
            brokers: dedup(flags.nsqd_http_addresses),
            admin_users: flags.admin_users,
            acl_http_header: flags.acl_http_header,
            notification_http_endpoint: notify,
            log_level: flags.log_level,
            tls: TlsFlags {
                insecure_skip_verify: flags.http_client_tls_insecure_skip_verify,
                root_ca_file: some_path(&flags.http_client_tls_root_ca_file),
                cert_and_key,
            },
            timeouts: Timeouts {
                connect: flags.http_client_connect_timeout,
                request: flags.http_client_request_timeout,
            },
        })
    }
}

/// The options as nsqadmin's `/config/:opt` shows them: config-file names, durations in
/// nanoseconds, the log level as nsqd's number, paths and URLs as given (empty when not).
fn options_of(f: &Flags) -> Map<String, Value> {
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let json = serde_json::json!({
        "log_level": level_number(f.log_level),
        "log_prefix": f.log_prefix,
        "http_address": f.http_address.to_string(),
        "base_path": match normalize_base_path(&f.base_path).as_str() { "" => "/".to_owned(), p => p.to_owned() },
        "dev_static_dir": f.dev_static_dir,
        "graphite_url": f.graphite_url,
        "proxy_graphite": f.proxy_graphite,
        "statsd_prefix": f.statsd_prefix,
        "statsd_counter_format": f.statsd_counter_format,
        "statsd_gauge_format": f.statsd_gauge_format,
        "statsd_interval": nanos(f.statsd_interval),
        "nsqlookupd_http_addresses": dedup(f.lookupd_http_addresses.clone()),
        "nsqd_http_addresses": dedup(f.nsqd_http_addresses.clone()),
        "http_client_connect_timeout": nanos(f.http_client_connect_timeout),
        "http_client_request_timeout": nanos(f.http_client_request_timeout),
        "http_client_tls_insecure_skip_verify": f.http_client_tls_insecure_skip_verify,
        "http_client_tls_root_ca_file": f.http_client_tls_root_ca_file,
        "http_client_tls_cert": f.http_client_tls_cert,
        "http_client_tls_key": f.http_client_tls_key,
        "allow_config_from_cidr": f.allow_config_from_cidr.0.map(|c| c.to_string()).unwrap_or_default(),
        "notification_http_endpoint": f.notification_http_endpoint,
        "acl_http_header": f.acl_http_header,
        "admin_users": f.admin_users,
    });
    match json {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// nsqadmin's base path made canonical as Go's `path.Clean` would (a leading `/`, no `.`,
/// `..`, repeated or trailing `/`), then without the trailing slash so that it can be
/// prepended: `""` for the root.
pub fn normalize_base_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.iter().map(|p| format!("/{p}")).collect()
}

/// `--graphite-url`: empty (none) or a URL [`GraphiteUrl`] reads.
fn graphite_url(s: &str) -> Result<String, String> {
    if !s.is_empty() {
        GraphiteUrl::parse(s).map_err(|e| format!("failed to parse --graphite-url ({s}) - {e}"))?;
    }
    Ok(s.to_owned())
}

/// An empty `--allow-config-from-cidr` (anyone) or a CIDR.
fn cidr_or_empty(s: &str) -> Result<CidrFlag, String> {
    if s.is_empty() {
        return Ok(CidrFlag(None));
    }
    Cidr::parse(s)
        .map(|c| CidrFlag(Some(c)))
        .map_err(|e| format!("failed to parse --allow-config-from-cidr ({s}) - {e}"))
}

/// A usage error saying what is missing.
fn missing(what: &str) -> clap::Error {
    Flags::command().error(clap::error::ErrorKind::MissingRequiredArgument, what)
}

/// A Go duration (`2s`, `500ms`) more than zero.
fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = protocol::duration::parse_flag_duration(s)?;
    if d.is_zero() {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(d)
}

/// A boolean as Go's flag package reads it (`strconv.ParseBool`).
fn go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!("invalid boolean value {s:?}")),
    }
}

/// A listen address; an empty host (`:4171`) means every interface, as in Go.
fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    let full = match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => s.to_owned(),
    };
    let mut addrs = full
        .to_socket_addrs()
        .map_err(|e| format!("invalid address {s:?}: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("{s:?} resolves to nothing"))
}

/// A lookup's or broker's `host:port` (an `http://` prefix and a trailing `/` are dropped).
pub(crate) fn upstream_addr(s: &str) -> Result<String, String> {
    let a = s.trim_start_matches("http://").trim_end_matches('/');
    match a.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(a.to_owned()),
        _ => Err(format!("{s:?} is not host:port")),
    }
}

/// nsqd's number for a log level (`lg.LogLevel`).
pub fn level_number(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::TRACE | tracing::Level::DEBUG => 1,
        tracing::Level::INFO => 2,
        tracing::Level::WARN => 3,
        tracing::Level::ERROR => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        std::iter::once("admin-ui")
            .chain(a.iter().copied())
            .map(String::from)
            .collect()
    }

    #[test]
    fn nsqadmin_config_file_with_its_renamed_keys() {
        let dir = std::env::temp_dir().join(format!("admin-ui-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let path = dir.join("nsqadmin.cfg");
        std::fs::write(
            &path,
            "nsqlookupd_http_addresses = [\"127.0.0.1:4161\", \"127.0.0.1:4162\"]\nadmin_users = [\"ops\"]\n",
        )
        .ok();
        let c = Config::from_args(args(&[&format!("--config={}", path.display())]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.lookups, ["127.0.0.1:4161", "127.0.0.1:4162"]);
        assert_eq!(c.admin_users, ["ops"]);
        std::fs::write(&path, "graphite_thing = 1\n").ok();
        let e = Config::from_args(args(&[&format!("--config={}", path.display())]))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("line 1: unknown key `graphite_thing`"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// nsqadmin's contrib/nsqadmin.cfg.example with every key set (its commented ones too,
    /// empty strings included), then flags that override it.
    const FULL_EXAMPLE: &str = r#"
log_level = "info"
log_prefix = ""
acl_http_header = ""
admin_users = [
    "admin"
]
allow_config_from_cidr = ""
base_path = ""
http_client_connect_timeout = "2s"
http_client_request_timeout = "5s"
http_client_tls_cert = ""
http_client_tls_insecure_skip_verify = false
http_client_tls_key = ""
http_client_tls_root_ca_file = ""
http_address = "0.0.0.0:4171"
graphite_url = ""
proxy_graphite = false
statsd_prefix = "nsq.%s"
statsd_counter_format = "stats.counters.%s.count"
statsd_gauge_format = "stats.gauges.%s"
statsd_interval = "60s"
notification_http_endpoint = ""
nsqlookupd_http_addresses = [
    "127.0.0.1:4161"
]
nsqd_http_addresses = [
    "127.0.0.1:4151"
]
dev_static_dir = ""
verbose = false
"#;

    #[test]
    fn nsqadmins_example_config_with_every_key_and_overriding_flags() {
        let dir = std::env::temp_dir().join(format!("admin-ui-full-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok();
        let path = dir.join("nsqadmin.cfg");
        std::fs::write(&path, FULL_EXAMPLE).ok();
        let config = format!("--config={}", path.display());
        let c = Config::from_args(args(&[&config])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.lookups, ["127.0.0.1:4161"]);
        assert_eq!(c.brokers, ["127.0.0.1:4151"]);
        assert_eq!(c.admin_users, ["admin"]);
        assert_eq!(c.base_path, "");
        assert!(c.allow_config_from.is_none(), "empty: from anywhere");
        assert!(c.notification_http_endpoint.is_none() && c.tls.cert_and_key.is_none());
        assert!(c.graphite.url.is_none() && !c.graphite.proxy);
        assert_eq!(c.graphite.statsd_interval, Duration::from_secs(60));
        assert_eq!(c.without_effect.len(), 1, "{:?}", c.without_effect);
        let c = Config::from_args(args(&[
            &config,
            "--base-path=/admin/",
            "-allow-config-from-cidr=10.0.0.0/8",
            "--statsd-interval",
            "10s",
            "--graphite-url=http://g:8080",
            "-proxy-graphite",
            "--statsd-prefix=x.%s",
            "--lookupd-http-address=l:1",
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.base_path, "/admin");
        assert_eq!(
            c.allow_config_from.map(|c| c.to_string()).as_deref(),
            Some("10.0.0.0/8")
        );
        assert_eq!(c.graphite.statsd_interval, Duration::from_secs(10));
        assert!(c.graphite.proxy && c.graphite.url.is_some());
        assert_eq!(c.graphite.statsd_prefix, "x.%s");
        assert_eq!(c.lookups, ["l:1"], "the flag wins over the file");
        assert_eq!(c.options["statsd_interval"], 10_000_000_000u64);
        assert_eq!(c.options["base_path"], "/admin");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn base_paths_as_nsqadmin() {
        for (given, want) in [
            ("", ""),
            ("/", ""),
            ("admin", "/admin"),
            ("/admin/", "/admin"),
            ("//a/./b/../c/", "/a/c"),
        ] {
            assert_eq!(normalize_base_path(given), want, "{given:?}");
        }
        let proxy_alone = Config::from_args(args(&["--nsqd-http-address=h:1", "--proxy-graphite"]))
            .expect("nsqadmin starts with --proxy-graphite alone");
        assert!(
            proxy_alone
                .without_effect
                .iter()
                .any(|n| n.starts_with("--proxy-graphite: no --graphite-url")),
            "{:?}",
            proxy_alone.without_effect
        );
        for bad in ["--allow-config-from-cidr=10.0.0.1", "--graphite-url=g:80"] {
            assert!(
                Config::from_args(args(&["--nsqd-http-address=h:1", bad])).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn defaults_and_repeated_addresses() {
        let c = Config::from_args(args(&[
            "--lookupd-http-address",
            "http://127.0.0.1:4161/",
            "--lookupd-http-address=127.0.0.1:4161",
            "--nsqd-http-address=h:4151",
        ]))
        .unwrap();
        assert_eq!(c.http_address, "0.0.0.0:4171".parse().unwrap());
        assert_eq!(c.lookups, ["127.0.0.1:4161"]);
        assert_eq!(c.brokers, ["h:4151"]);
    }

    #[test]
    fn refuses_nothing_to_read_and_bad_addresses() {
        assert!(Config::from_args(args(&[])).is_err());
        assert!(Config::from_args(args(&["--nsqd-http-address=nohost"])).is_err());
        assert!(Config::from_args(args(&["--nsqd-http-address=:4151"])).is_err());
        assert!(Config::from_args(args(&["--nsqd-http-address=h:99999"])).is_err());
        let c = Config::from_args(args(&["--http-address=:0", "--nsqd-http-address=h:1"]));
        assert_eq!(c.unwrap().http_address, "0.0.0.0:0".parse().unwrap());
    }

    #[test]
    fn go_style_flags_and_nsqadmin_log_levels() {
        let c = Config::from_args(args(&[
            "-http-address=127.0.0.1:1",
            "-lookupd-http-address",
            "l:4161",
            "-log-level=FATAL",
        ]))
        .unwrap();
        assert_eq!(c.http_address, "127.0.0.1:1".parse().unwrap());
        assert_eq!(c.lookups, ["l:4161"]);
        assert_eq!(c.log_level, tracing::Level::ERROR);
        assert!(Config::from_args(args(&["-nsqd-http-address=h:1", "--log-level=loud"])).is_err());
    }

    #[test]
    fn http_client_timeouts() {
        let c = Config::from_args(args(&["--nsqd-http-address=h:1"])).unwrap();
        assert_eq!(c.timeouts, Timeouts::default());
        let c = Config::from_args(args(&[
            "--nsqd-http-address=h:1",
            "-http-client-connect-timeout=250ms",
            "--http-client-request-timeout=1m",
        ]))
        .unwrap();
        assert_eq!(c.timeouts.connect, Duration::from_millis(250));
        assert_eq!(c.timeouts.request, Duration::from_secs(60));
        for bad in ["=0", "=0s", "=5", "=soon"] {
            let a = format!("--http-client-request-timeout{bad}");
            assert!(
                Config::from_args(args(&["--nsqd-http-address=h:1", &a])).is_err(),
                "{a}"
            );
        }
    }

    #[test]
    fn tls_client_flags_as_nsqadmin() {
        let c = Config::from_args(args(&["--nsqd-http-address=h:1"])).unwrap();
        assert!(!c.tls.insecure_skip_verify);
        assert!(c.tls.root_ca_file.is_none() && c.tls.cert_and_key.is_none());
        let c = Config::from_args(args(&[
            "--nsqd-http-address=h:1",
            "-http-client-tls-insecure-skip-verify",
            "-http-client-tls-root-ca-file=/ca.pem",
            "--http-client-tls-cert",
            "/c.pem",
            "--http-client-tls-key=/k.pem",
        ]))
        .unwrap();
        assert!(c.tls.insecure_skip_verify);
        assert_eq!(c.tls.root_ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            c.tls.cert_and_key,
            Some((PathBuf::from("/c.pem"), PathBuf::from("/k.pem")))
        );
        for (flag, want) in [
            ("=false", false),
            ("=true", true),
            ("=1", true),
            ("=F", false),
        ] {
            let a = format!("--http-client-tls-insecure-skip-verify{flag}");
            let c = Config::from_args(args(&["--nsqd-http-address=h:1", &a])).unwrap();
            assert_eq!(c.tls.insecure_skip_verify, want, "{a}");
        }
        let bad = "--http-client-tls-insecure-skip-verify=maybe";
        assert!(Config::from_args(args(&["--nsqd-http-address=h:1", bad])).is_err());
        let e = Config::from_args(args(&[
            "--nsqd-http-address=h:1",
            "--http-client-tls-cert=/c",
        ]))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("--http-client-tls-key must be specified"),
            "{e}"
        );
        let e = Config::from_args(args(&[
            "--nsqd-http-address=h:1",
            "--http-client-tls-key=/k",
        ]))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("--http-client-tls-cert must be specified"),
            "{e}"
        );
    }
}

/// The admin-ui's section of the flags reference (`docs/flags.md`), generated from [`Flags`] and
/// checked against the committed file: a flag changed without the file fails `cargo test`.
#[cfg(test)]
mod flags_doc {
    use super::*;

    #[test]
    fn flags_doc_matches_the_code() {
        let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/flags.md");
        let table = nsq_common::flags_doc::table(&Flags::command(), RENAMED_KEYS);
        if let Err(e) = nsq_common::flags_doc::check_section(&doc, "admin-ui", &table) {
            panic!("{e}");
        }
    }
}
