//! `--consumer-opt` / `--producer-opt`: go-nsq's `Config` keys, given as NSQ's apps take them
//! (`key,value`; a bare `key` means `true`; `-` in a key reads as `_`), applied to the client's
//! [`ConsumerConfig`] / [`ProducerConfig`].
//!
//! Values are read as go-nsq's `Config.Set` reads strings: durations as Go durations (`250ms`,
//! `1m30s`), booleans as Go's `strconv.ParseBool`, numbers in decimal; go-nsq's ranges are
//! checked. A key go-nsq does not know, or a bad value, is an error naming it. Keys go-nsq
//! knows that this client has no setting for (see [`NO_EFFECT`]) are accepted and checked,
//! then logged as having no effect.

use client::{ConsumerConfig, ProducerConfig, TlsConfig};
use std::time::Duration;

/// go-nsq keys accepted and checked, with nothing to set in this client.
pub const NO_EFFECT: &[&str] = &[
    "read_timeout",
    "write_timeout",
    "local_addr",
    "lookupd_poll_timeout",
    "backoff_strategy",
    "low_rdy_timeout",
    "rdy_redistribute_interval",
    "topology_region",
    "topology_zone",
    "sample_rate",
    "output_buffer_size",
    "output_buffer_timeout",
    "max_msg_size",
    "skip_lookupd_authorization",
    "tls_min_version",
];

/// Settings collected from the options, applied in the order given.
#[derive(Debug, Clone, Default)]
pub struct GoConfig {
    settings: Vec<Setting>,
    tls: TlsConfig,
    tls_touched: bool,
    cert: Option<String>,
    key: Option<String>,
}

#[derive(Debug, Clone)]
enum Setting {
    ConnectTimeout(Duration),
    PollInterval(Duration),
    PollJitter(f64),
    MaxRequeueDelay(Duration),
    RequeueDelay(Duration),
    MaxBackoff(Duration),
    BackoffMultiplier(Duration),
    MaxAttempts(u16),
    LowRdyIdle(Duration),
    ClientId(String),
    Hostname(String),
    UserAgent(String),
    Heartbeat(Duration),
    TlsV1(bool),
    Deflate(bool),
    DeflateLevel(u32),
    Snappy(bool),
    MaxInFlight(u64),
    MsgTimeout(Duration),
    AuthSecret(String),
}

impl GoConfig {
    /// Reads every `key,value` option (as given on the command line, in order).
    pub fn parse(opts: &[String]) -> Result<GoConfig, String> {
        let mut c = GoConfig::default();
        for opt in opts {
            let (key, value) = match opt.split_once(',') {
                Some((k, v)) => (k, v),
                None => (opt.as_str(), "true"),
            };
            let key = key.replace('-', "_");
            c.set(&key, value)
                .map_err(|e| format!("invalid option {opt:?}: {e}"))?;
        }
        if c.cert.is_some() != c.key.is_some() {
            return Err("tls_cert and tls_key must be given together".into());
        }
        if let (Some(cert), Some(key)) = (&c.cert, &c.key) {
            c.tls = c.tls.clone().client_cert(cert, key);
        }
        Ok(c)
    }

    fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let s = match key {
            "dial_timeout" => Setting::ConnectTimeout(duration(v, None, None)?),
            "lookupd_poll_interval" => Setting::PollInterval(duration(v, ms(10), mins(5))?),
            "lookupd_poll_jitter" => {
                let j: f64 = v.parse().map_err(|_| format!("{v:?} is not a number"))?;
                if !(0.0..=1.0).contains(&j) {
                    return Err(format!("{j} is not in 0..1"));
                }
                Setting::PollJitter(j)
            }
            "max_requeue_delay" => Setting::MaxRequeueDelay(duration(v, None, mins(60))?),
            "default_requeue_delay" => Setting::RequeueDelay(duration(v, None, mins(60))?),
            "max_backoff_duration" => Setting::MaxBackoff(duration(v, None, mins(60))?),
            "backoff_multiplier" => Setting::BackoffMultiplier(duration(v, None, mins(60))?),
            "max_attempts" => Setting::MaxAttempts(int(v, 0, 65_535)? as u16),
            "low_rdy_idle_timeout" => Setting::LowRdyIdle(duration(v, secs(1), mins(5))?),
            "client_id" => Setting::ClientId(v.to_string()),
            "hostname" => Setting::Hostname(v.to_string()),
            "user_agent" => Setting::UserAgent(v.to_string()),
            "heartbeat_interval" => Setting::Heartbeat(duration(v, None, None)?),
            "tls_v1" => Setting::TlsV1(go_bool(v)?),
            "deflate" => Setting::Deflate(go_bool(v)?),
            "deflate_level" => Setting::DeflateLevel(int(v, 1, 9)? as u32),
            "snappy" => Setting::Snappy(go_bool(v)?),
            "max_in_flight" => Setting::MaxInFlight(int(v, 0, i64::MAX)? as u64),
            "msg_timeout" => Setting::MsgTimeout(duration(v, None, None)?),
            "auth_secret" => Setting::AuthSecret(v.to_string()),
            "tls_root_ca_file" => {
                self.tls_touched = true;
                self.tls = self.tls.clone().root_ca_file(v);
                return Ok(());
            }
            "tls_insecure_skip_verify" => {
                self.tls_touched = true;
                self.tls = self.tls.clone().insecure_skip_verify(go_bool(v)?);
                return Ok(());
            }
            "tls_cert" => {
                self.tls_touched = true;
                self.cert = Some(v.to_string());
                return Ok(());
            }
            "tls_key" => {
                self.tls_touched = true;
                self.key = Some(v.to_string());
                return Ok(());
            }
            "tls_config" => return Err("tls_config cannot be set from the command line".into()),
            _ if NO_EFFECT.contains(&key) => {
                check_no_effect(key, v)?;
                tracing::info!(option = key, "accepted; it has no effect in this client");
                return Ok(());
            }
            _ => return Err(format!("unknown option {key}")),
        };
        self.settings.push(s);
        Ok(())
    }

    /// `config` with these settings applied.
    pub fn consumer(&self, mut c: ConsumerConfig) -> ConsumerConfig {
        for s in &self.settings {
            c = match s.clone() {
                Setting::ConnectTimeout(d) => c.connect_timeout(d),
                Setting::PollInterval(d) => c.lookupd_poll_interval(d),
                Setting::PollJitter(j) => c.lookupd_poll_jitter(j),
                Setting::MaxRequeueDelay(d) => c.max_requeue_delay(d),
                Setting::RequeueDelay(d) => c.requeue_delay(d),
                Setting::MaxBackoff(d) => c.max_backoff_duration(d),
                Setting::BackoffMultiplier(d) => c.backoff_multiplier(d),
                Setting::MaxAttempts(n) => c.max_attempts(n),
                Setting::LowRdyIdle(d) => c.low_rdy_idle_timeout(d),
                Setting::MaxInFlight(n) => c.max_in_flight(n),
                other => {
                    c.identity = apply_identity(c.identity, &other);
                    c.features = self.apply_features(c.features, &other);
                    c
                }
            };
        }
        if self.tls_touched {
            c.features.tls_config = self.tls.clone();
        }
        c
    }

    /// `config` with these settings applied (consumer-only keys have no effect on it).
    pub fn producer(&self, mut c: ProducerConfig) -> ProducerConfig {
        for s in &self.settings {
            if let Setting::ConnectTimeout(d) = s {
                c.connect_timeout = *d;
            }
            c.identity = apply_identity(c.identity, s);
            c.features = self.apply_features(c.features, s);
        }
        if self.tls_touched {
            c.features.tls_config = self.tls.clone();
        }
        c
    }

    fn apply_features(&self, mut f: client::Features, s: &Setting) -> client::Features {
        match s {
            Setting::TlsV1(b) => f.tls_v1 = *b,
            Setting::Deflate(b) => f.deflate = *b,
            Setting::DeflateLevel(n) => f.deflate_level = *n,
            Setting::Snappy(b) => f.snappy = *b,
            Setting::AuthSecret(a) => f.auth_secret = Some(a.clone()),
            _ => {}
        }
        f
    }
}

fn apply_identity(mut i: client::Identity, s: &Setting) -> client::Identity {
    match s {
        Setting::ClientId(v) => i.client_id = v.clone(),
        Setting::Hostname(v) => i.hostname = v.clone(),
        Setting::UserAgent(v) => i.user_agent = v.clone(),
        Setting::Heartbeat(d) => i.heartbeat_interval = *d,
        Setting::MsgTimeout(d) if !d.is_zero() => i.msg_timeout = Some(*d),
        _ => {}
    }
    i
}

/// Checks the value of a key without effect as go-nsq would.
fn check_no_effect(key: &str, v: &str) -> Result<(), String> {
    match key {
        "read_timeout" | "write_timeout" => duration(v, ms(100), mins(5)).map(drop),
        "lookupd_poll_timeout" | "output_buffer_timeout" => duration(v, None, None).map(drop),
        "low_rdy_timeout" => duration(v, secs(1), mins(5)).map(drop),
        "rdy_redistribute_interval" => duration(v, ms(1), secs(5)).map(drop),
        "sample_rate" => int(v, 0, 99).map(drop),
        "output_buffer_size" => int(v, i64::MIN, i64::MAX).map(drop),
        "max_msg_size" => int(v, 0, i64::from(i32::MAX)).map(drop),
        "skip_lookupd_authorization" => go_bool(v).map(drop),
        "backoff_strategy" => match v {
            "" | "exponential" | "full_jitter" => Ok(()),
            _ => Err(format!("unknown backoff strategy {v:?}")),
        },
        "tls_min_version" => match v {
            "ssl3.0" | "tls1.0" | "tls1.1" | "tls1.2" => Ok(()),
            _ => Err(format!("{v:?} is not a tls version")),
        },
        _ => Ok(()),
    }
}

fn ms(n: u64) -> Option<Duration> {
    Some(Duration::from_millis(n))
}
fn secs(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(n))
}
fn mins(n: u64) -> Option<Duration> {
    Some(Duration::from_secs(60 * n))
}

/// A Go duration within `[min, max]`.
pub fn duration(v: &str, min: Option<Duration>, max: Option<Duration>) -> Result<Duration, String> {
    let d = protocol::duration::parse_flag_duration(v)?;
    if let Some(min) = min.filter(|m| d < *m) {
        return Err(format!(
            "{v} < {}",
            protocol::duration::format_duration(min)
        ));
    }
    if let Some(max) = max.filter(|m| d > *m) {
        return Err(format!(
            "{v} > {}",
            protocol::duration::format_duration(max)
        ));
    }
    Ok(d)
}

fn int(v: &str, min: i64, max: i64) -> Result<i64, String> {
    let n: i64 = v.parse().map_err(|_| format!("{v:?} is not an integer"))?;
    if n < min {
        return Err(format!("{n} < {min}"));
    }
    if n > max {
        return Err(format!("{n} > {max}"));
    }
    Ok(n)
}

/// Go's `strconv.ParseBool`.
pub fn go_bool(v: &str) -> Result<bool, String> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{v:?} is not a boolean")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(opts: &[&str]) -> Result<GoConfig, String> {
        GoConfig::parse(&opts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn consumer_keys_reach_the_client_config() {
        let g = parse(&[
            "max_attempts,7",
            "lookupd-poll-interval,250ms",
            "snappy",
            "auth_secret,s3",
            "msg_timeout,45s",
            "tls_v1,true",
            "tls_insecure_skip_verify,1",
            "dial_timeout,2s",
        ])
        .expect("valid");
        let c = g.consumer(ConsumerConfig::new("t", "c"));
        assert_eq!(c.max_attempts, 7);
        assert_eq!(c.lookupd_poll_interval, Duration::from_millis(250));
        assert!(c.features.snappy && c.features.tls_v1);
        assert!(c.features.tls_config.insecure_skip_verify);
        assert_eq!(c.features.auth_secret.as_deref(), Some("s3"));
        assert_eq!(c.identity.msg_timeout, Some(Duration::from_secs(45)));
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        let p = g.producer(ProducerConfig::new());
        assert!(p.features.snappy);
        assert_eq!(p.connect_timeout, Duration::from_secs(2));
    }

    #[test]
    fn bad_keys_and_values_name_the_option() {
        for bad in [
            "nope,1",
            "max_attempts,x",
            "max_attempts,70000",
            "deflate_level,0",
            "snappy,maybe",
            "read_timeout,10ms",
            "lookupd_poll_interval,60",
            "tls_config,x",
            "tls_cert,a.pem",
            "lookupd_poll_jitter,2",
        ] {
            let err = parse(&[bad]).expect_err(bad);
            assert!(err.contains(bad.split(',').next().unwrap_or(bad)), "{err}");
        }
    }

    #[test]
    fn keys_without_effect_are_checked_and_accepted() {
        parse(&[
            "read_timeout,30s",
            "sample_rate,10",
            "backoff_strategy,full_jitter",
            "tls_min_version,tls1.2",
            "output_buffer_size,-1",
        ])
        .expect("accepted");
        assert!(parse(&["sample_rate,100"]).is_err());
    }
}
