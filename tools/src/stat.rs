//! nsq_stat: polls `/stats` of every broker of `--topic` (given by `--nsqd-http-address`, or
//! found through `--lookupd-http-address`) every `--interval` and prints one line of the
//! channel's stats summed over them, in NSQ's columns: ingress and egress rates (per second
//! over the interval), depth (total, memory, disk), in-flight, deferred, requeued, timed out,
//! messages and clients. The two header lines come before the first report and every 25
//! polls after it; the first poll only takes the baseline. `--count N` stops after N lines
//! (N + 1 polls) with status 0.
//!
//! Invariants: a poll that cannot reach a broker or does not find the channel ends the process
//! with status 1 and NSQ's message, as NSQ's nsq_stat does; nothing is printed for it.

use crate::cli::{go_bool, go_duration};
use crate::http::{self, Timeouts, Url};
use crate::start::{self, ToolOptions};
use clap::Parser;
use serde_json::Value;
use std::io::Write;
use std::time::Duration;

const TOOL: &str = "nsq_stat";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "nsq_stat",
    about = "Polls /stats of a topic's brokers and prints a channel's stats (NSQ's nsq_stat)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Options {
    /// print version
    #[arg(long, value_parser = go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub version: bool,
    /// NSQ topic
    #[arg(long, default_value = "")]
    pub topic: String,
    /// NSQ channel
    #[arg(long, default_value = "")]
    pub channel: String,
    /// duration of time between polling/printing output
    #[arg(long, value_parser = go_duration, default_value = "2s")]
    pub interval: Duration,
    /// timeout for HTTP connect
    #[arg(long = "http-client-connect-timeout", value_parser = go_duration, default_value = "2s")]
    pub http_client_connect_timeout: Duration,
    /// timeout for HTTP request
    #[arg(long = "http-client-request-timeout", value_parser = go_duration, default_value = "5s")]
    pub http_client_request_timeout: Duration,
    /// number of reports
    #[arg(long, allow_negative_numbers = true)]
    pub count: Option<i32>,
    /// nsqd HTTP address (may be given multiple times)
    #[arg(long = "nsqd-http-address")]
    pub nsqd_http_address: Vec<String>,
    /// lookupd HTTP address (may be given multiple times)
    #[arg(long = "lookupd-http-address")]
    pub lookupd_http_address: Vec<String>,
}

impl ToolOptions for Options {
    fn version(&self) -> bool {
        self.version
    }
}

/// One channel's numbers, summed over brokers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChannelStats {
    pub depth: i64,
    pub memory_depth: i64,
    pub backend_depth: i64,
    pub in_flight: i64,
    pub deferred: i64,
    pub requeued: i64,
    pub timed_out: i64,
    pub messages: i64,
    pub clients: i64,
}

/// The two header lines, NSQ's.
pub fn header() -> String {
    format!(
        "{}+{}+{}\n{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}\n",
        "------rate------",
        "----------------depth----------------",
        "--------------metadata---------------",
        "ingress",
        "egress",
        "total",
        "mem",
        "disk",
        "inflt",
        "def",
        "req",
        "t-o",
        "msgs",
        "clients"
    )
}

/// One report line from the previous poll `o` and this one `c`, `interval` apart.
pub fn row(o: &ChannelStats, c: &ChannelStats, interval: Duration) -> String {
    let secs = interval.as_secs_f64();
    let ingress = (c.messages - o.messages) as f64 / secs;
    let egress = (c.messages - o.messages - (c.depth - o.depth)) as f64 / secs;
    format!(
        "{:>7} {:>7} | {:>7} {:>7} {:>7} {:>5} {:>5} | {:>7} {:>7} {:>12} {:>7}\n",
        ingress as i64,
        egress as i64,
        c.depth,
        c.memory_depth,
        c.backend_depth,
        c.in_flight,
        c.deferred,
        c.requeued,
        c.timed_out,
        c.messages,
        c.clients
    )
}

/// The stats of `channel` of `topic` in one broker's `/stats` JSON (bare or inside `data`):
/// `Ok(None)` when the broker does not have the topic, `Ok(Some(None))` when it has the topic
/// but not the channel.
pub fn channel_in(stats: &Value, topic: &str, channel: &str) -> Option<Option<ChannelStats>> {
    let stats = stats.get("data").unwrap_or(stats);
    let t = stats
        .get("topics")?
        .as_array()?
        .iter()
        .find(|t| t.get("topic_name").and_then(Value::as_str) == Some(topic))?;
    let c = t.get("channels").and_then(Value::as_array).and_then(|cs| {
        cs.iter()
            .find(|c| c.get("channel_name").and_then(Value::as_str) == Some(channel))
    });
    let Some(c) = c else {
        return Some(None);
    };
    let n = |k: &str| c.get(k).and_then(Value::as_i64).unwrap_or(0);
    let depth = n("depth");
    let backend = n("backend_depth");
    let clients = match c.get("client_count").and_then(Value::as_i64) {
        Some(n) => n,
        None => c
            .get("clients")
            .and_then(Value::as_array)
            .map_or(0, |a| a.len() as i64),
    };
    Some(Some(ChannelStats {
        depth,
        memory_depth: depth - backend,
        backend_depth: backend,
        in_flight: n("in_flight_count"),
        deferred: n("deferred_count"),
        requeued: n("requeue_count"),
        timed_out: n("timeout_count"),
        messages: n("message_count"),
        clients,
    }))
}

impl ChannelStats {
    fn add(&mut self, o: &ChannelStats) {
        self.depth += o.depth;
        self.memory_depth += o.memory_depth;
        self.backend_depth += o.backend_depth;
        self.in_flight += o.in_flight;
        self.deferred += o.deferred;
        self.requeued += o.requeued;
        self.timed_out += o.timed_out;
        self.messages += o.messages;
        self.clients += o.clients;
    }
}

/// The program; the exit status.
pub fn main() -> i32 {
    let Some(opts) = start::options::<Options>(TOOL) else {
        return 0;
    };
    if opts.topic.is_empty() || opts.channel.is_empty() {
        return start::fatal(TOOL, "--topic and --channel are required");
    }
    if opts.interval.is_zero() {
        return start::fatal(TOOL, "--interval should be positive");
    }
    if opts.http_client_connect_timeout.is_zero() {
        return start::fatal(TOOL, "--http-client-connect-timeout should be positive");
    }
    if opts.http_client_request_timeout.is_zero() {
        return start::fatal(TOOL, "--http-client-request-timeout should be positive");
    }
    if opts.count.is_some_and(|c| c <= 0) {
        return start::fatal(TOOL, "--count should be positive");
    }
    if opts.nsqd_http_address.is_empty() && opts.lookupd_http_address.is_empty() {
        return start::fatal(
            TOOL,
            "--nsqd-http-address or --lookupd-http-address required",
        );
    }
    if !opts.nsqd_http_address.is_empty() && !opts.lookupd_http_address.is_empty() {
        return start::fatal(
            TOOL,
            "use --nsqd-http-address or --lookupd-http-address not both",
        );
    }
    for (flag, addrs) in [
        ("--nsqd-http-address", &opts.nsqd_http_address),
        ("--lookupd-http-address", &opts.lookupd_http_address),
    ] {
        if addrs.iter().any(|a| a.starts_with("http")) {
            return start::fatal(
                TOOL,
                format!("{flag} error - address should not contain scheme"),
            );
        }
    }
    start::run(TOOL, move |signals| async move {
        let polls = futures_lite::future::or(async { stat_loop(&opts).await }, async {
            signals.terminated().await;
            Ok(())
        });
        polls.await
    })
}

async fn stat_loop(opts: &Options) -> Result<(), String> {
    let timeouts = Timeouts {
        connect: opts.http_client_connect_timeout,
        request: opts.http_client_request_timeout,
    };
    let mut previous: Option<ChannelStats> = None;
    let mut i: i64 = 0;
    while opts.count.is_none_or(|n| i64::from(n) >= i) {
        let brokers = if opts.lookupd_http_address.is_empty() {
            opts.nsqd_http_address.clone()
        } else {
            lookup_brokers(&opts.lookupd_http_address, &opts.topic, timeouts)
                .await
                .map_err(|e| format!("ERROR: failed to get topic producers - {e}"))?
        };
        let c = poll(&brokers, &opts.topic, &opts.channel, timeouts).await?;
        let mut out = String::new();
        if i % 25 == 0 {
            out.push_str(&header());
        }
        if let Some(o) = &previous {
            out.push_str(&row(o, &c, opts.interval));
        }
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(out.as_bytes())
            .and_then(|_| stdout.flush())
            .map_err(|e| format!("writing to stdout: {e}"))?;
        previous = Some(c);
        glommio::timer::sleep(opts.interval).await;
        i += 1;
    }
    Ok(())
}

/// The HTTP addresses of the brokers the lookups know for `topic` (their union).
async fn lookup_brokers(
    lookups: &[String],
    topic: &str,
    timeouts: Timeouts,
) -> Result<Vec<String>, String> {
    let mut brokers = std::collections::BTreeSet::new();
    let mut errors = Vec::new();
    for l in lookups {
        match client::lookup::query(l, topic, timeouts.request).await {
            Ok(answer) => {
                for p in answer.producers {
                    let host = &p.broadcast_address;
                    if host.contains(':') && !host.starts_with('[') {
                        brokers.insert(format!("[{host}]:{}", p.http_port));
                    } else {
                        brokers.insert(format!("{host}:{}", p.http_port));
                    }
                }
            }
            Err(e) => errors.push(format!("{l}: {e}")),
        }
    }
    if errors.len() == lookups.len() {
        return Err(errors.join("; "));
    }
    Ok(brokers.into_iter().collect())
}

/// The channel's stats summed over `brokers`.
async fn poll(
    brokers: &[String],
    topic: &str,
    channel: &str,
    timeouts: Timeouts,
) -> Result<ChannelStats, String> {
    let mut sum = ChannelStats::default();
    let mut found = false;
    let target = format!(
        "/stats?format=json&topic={}&channel={}",
        http1::percent_encode(topic),
        http1::percent_encode(channel)
    );
    for b in brokers {
        let url = Url::parse(&format!("http://{b}{target}"))?;
        let answer = http::request(
            &url,
            "GET",
            &[("Accept", http1::client::ACCEPT_NSQ_V1)],
            b"",
            timeouts,
            None,
        )
        .await
        .map_err(|e| format!("ERROR: failed to get nsqd stats - {e}"))?;
        if answer.status != 200 {
            return Err(format!(
                "ERROR: failed to get nsqd stats - {b}: status {}",
                answer.status
            ));
        }
        let stats: Value = serde_json::from_slice(&answer.body)
            .map_err(|e| format!("ERROR: failed to get nsqd stats - {b}: {e}"))?;
        if let Some(Some(c)) = channel_in(&stats, topic, channel) {
            sum.add(&c);
            found = true;
        }
    }
    if !found {
        return Err(format!(
            "ERROR: failed to find channel({channel}) in stats metadata for topic({topic})"
        ));
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_header_in_nsqs_columns() {
        let h = header();
        assert!(h.starts_with("------rate------+"));
        assert!(h.ends_with("    msgs clients\n"), "{h:?}");
        let o = ChannelStats {
            messages: 10,
            depth: 10,
            ..Default::default()
        };
        let c = ChannelStats {
            messages: 30,
            depth: 14,
            memory_depth: 14,
            clients: 1,
            ..Default::default()
        };
        assert_eq!(
            row(&o, &c, Duration::from_secs(2)),
            "     10       8 |      14      14       0     0     0 |       0       0           30       1\n"
        );
    }

    #[test]
    fn channel_found_in_bare_and_wrapped_stats() {
        let s: Value = serde_json::from_str(
            r#"{"data":{"topics":[{"topic_name":"t","channels":[{"channel_name":"c","depth":5,
            "backend_depth":2,"message_count":9,"client_count":3,"in_flight_count":1}]}]}}"#,
        )
        .expect("json");
        let c = channel_in(&s, "t", "c").flatten().expect("found");
        assert_eq!(
            (c.depth, c.memory_depth, c.messages, c.clients, c.in_flight),
            (5, 3, 9, 3, 1)
        );
        assert_eq!(channel_in(&s, "t", "x"), Some(None));
        assert_eq!(channel_in(&s, "u", "c"), None);
    }
}
