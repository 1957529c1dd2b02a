//! nsq_to_http: consumes `--topic` on `--channel` and sends each message to HTTP endpoints:
//! `--post` (the body as the request body, `--content-type`) or `--get` (the body, query-
//! escaped, in place of the address's one `%s`). `--mode` picks the endpoint
//! ([`crate::pool`]; a mode NSQ does not list sends to every endpoint in turn), `-n` bounds the
//! requests under way, `--sample` sends only that share of the messages (the others are
//! FINished unsent), `--header` adds `Key: value` headers, `--status-every` logs NSQ's status
//! lines. `https://` endpoints go over rustls (the system's roots, or
//! `--http-client-tls-root-ca-file`; these TLS flags are beyond NSQ's).
//!
//! Connections to the endpoints are kept open between requests (`http::Client`).
//!
//! Invariants: a message is FINished only after its endpoint (every endpoint, in the "all"
//! mode) answered 2xx to a POST or 200 to a GET within `--http-client-request-timeout`; any
//! other answer, a timeout or a connection failure REQueues it with backoff (go-nsq's
//! `Requeue(-1)`), so a message may reach an endpoint more than once, never zero times.
//! SIGINT / SIGTERM stop the consumer (requests under way end first), then exit 0.

use crate::cli::{self, go_bool, go_duration, Signals};
use crate::cli::{ConsumerFlags, StatsFlag, VersionFlag};
use crate::goconfig::GoConfig;
use crate::http::{Client, Timeouts, Url};
use crate::metrics::Metrics;
use crate::pool::{Mode, Pool, TimerMetrics};
use crate::start::{self, ToolOptions};
use clap::Parser;
use client::{Consumer, ConsumerConfig, HandlerResult, Message, TlsConfig};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOOL: &str = "nsq_to_http";
const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "nsq_to_http",
    about = "Sends the messages of an NSQ topic to HTTP endpoints (NSQ's nsq_to_http)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Options {
    #[command(flatten)]
    pub v: VersionFlag,
    /// nsq topic
    #[arg(long, default_value = "")]
    pub topic: String,
    /// nsq channel
    #[arg(long, default_value = "nsq_to_http")]
    pub channel: String,
    /// number of concurrent publishers
    #[arg(long = "n", default_value_t = 100)]
    pub n: usize,
    /// the upstream request mode options: round-robin, hostpool (default), epsilon-greedy
    #[arg(long, default_value = "hostpool")]
    pub mode: String,
    /// % of messages to publish (float b/w 0 -> 1)
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub sample: f64,
    /// timeout for HTTP connect
    #[arg(long = "http-client-connect-timeout", value_parser = go_duration, default_value = "2s")]
    pub http_client_connect_timeout: Duration,
    /// timeout for HTTP request
    #[arg(long = "http-client-request-timeout", value_parser = go_duration, default_value = "20s")]
    pub http_client_request_timeout: Duration,
    /// the # of requests between logging status (per handler), 0 disables
    #[arg(long = "status-every", default_value_t = 250)]
    pub status_every: usize,
    /// the Content-Type used for POST requests (default "application/octet-stream")
    #[arg(long = "content-type")]
    pub content_type: Option<String>,
    /// HTTP address to make a POST request to.  data will be in the body (may be given
    /// multiple times)
    #[arg(long)]
    pub post: Vec<String>,
    /// Custom header for HTTP requests (may be given multiple times)
    #[arg(long)]
    pub header: Vec<String>,
    /// HTTP address to make a GET request to. '%s' will be printf replaced with data (may be
    /// given multiple times)
    #[arg(long)]
    pub get: Vec<String>,
    /// (beyond NSQ) CA certificates (PEM) to check https endpoints against, instead of the
    /// system's
    #[arg(long = "http-client-tls-root-ca-file")]
    pub tls_root_ca_file: Option<String>,
    /// (beyond NSQ) a client certificate (PEM) for https endpoints, with
    /// --http-client-tls-key
    #[arg(long = "http-client-tls-cert")]
    pub tls_cert: Option<String>,
    /// (beyond NSQ) the client certificate's key (PEM)
    #[arg(long = "http-client-tls-key")]
    pub tls_key: Option<String>,
    /// (beyond NSQ) accept any certificate from https endpoints
    #[arg(long = "http-client-tls-insecure-skip-verify", value_parser = go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub tls_insecure_skip_verify: bool,
    #[command(flatten)]
    pub consumer: ConsumerFlags,
    #[command(flatten)]
    pub stats: StatsFlag,
}

impl ToolOptions for Options {
    fn version(&self) -> bool {
        self.v.version
    }
}

/// `--header` values as NSQ reads them: `Key: value`, both trimmed and non-empty.
pub fn parse_headers(raw: &[String]) -> Result<Vec<(String, String)>, String> {
    raw.iter()
        .map(|s| {
            let (k, v) = s
                .split_once(':')
                .ok_or_else(|| format!("invalid header: {s:?}"))?;
            let (k, v) = (k.trim(), v.trim());
            if k.is_empty() || v.is_empty() {
                return Err(format!("invalid header: {s:?}"));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// Go's `url.QueryEscape`: unreserved bytes kept, space as `+`, the rest `%XX`.
pub fn query_escape(body: &[u8]) -> String {
    let mut out = String::with_capacity(body.len() * 3);
    for &b in body {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// How messages are sent, built from the options.
struct Sender {
    endpoints: Vec<String>,
    get: bool,
    content_type: String,
    headers: Vec<(String, String)>,
    user_agent: String,
    client: Client,
    pool: RefCell<Pool>,
    per_address: Vec<RefCell<TimerMetrics>>,
    aggregate: RefCell<TimerMetrics>,
    sample: f64,
    rng: Cell<u64>,
    slots: glommio::sync::Semaphore,
    /// `--stats-address`'s counters.
    metrics: Rc<Metrics>,
}

impl Sender {
    /// One request of `body` to endpoint `i`.
    async fn send(&self, i: usize, body: &[u8]) -> Result<(), String> {
        let endpoint = self.endpoints.get(i).ok_or("no such endpoint")?;
        let (address, payload): (String, &[u8]) = if self.get {
            (endpoint.replacen("%s", &query_escape(body), 1), b"")
        } else {
            (endpoint.clone(), body)
        };
        let url = Url::parse(&address)?;
        let mut headers: Vec<(&str, &str)> = vec![("User-Agent", self.user_agent.as_str())];
        if !self.get {
            headers.push(("Content-Type", self.content_type.as_str()));
        }
        for (k, v) in &self.headers {
            headers.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
            headers.push((k.as_str(), v.as_str()));
        }
        let method = if self.get { "GET" } else { "POST" };
        let answer = self.client.request(&url, method, &headers, payload).await?;
        let ok = if self.get {
            answer.status == 200
        } else {
            (200..300).contains(&answer.status)
        };
        if !ok {
            return Err(format!("got status code {}", answer.status));
        }
        Ok(())
    }

    /// True when this message is in `--sample`.
    fn sampled(&self) -> bool {
        if self.sample >= 1.0 {
            return true;
        }
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        ((x >> 11) as f64 / (1u64 << 53) as f64) <= self.sample
    }

    async fn handle(&self, msg: Message) -> HandlerResult {
        if !self.sampled() {
            return HandlerResult::Finish;
        }
        let Ok(_slot) = self.slots.acquire_permit(1).await else {
            self.metrics.error("stopping");
            return HandlerResult::requeue();
        };
        let start = Instant::now();
        let mode = self.pool.borrow().mode();
        let targets: Vec<usize> = if mode == Mode::All {
            (0..self.endpoints.len()).collect()
        } else {
            vec![self.pool.borrow_mut().pick(start)]
        };
        for i in targets {
            let st = Instant::now();
            let result = self.send(i, msg.body()).await;
            let took = st.elapsed();
            self.pool
                .borrow_mut()
                .mark(i, result.is_ok(), took, Instant::now());
            if let Err(e) = result {
                let endpoint = self.endpoints.get(i).map_or("", String::as_str);
                self.metrics.error("http");
                tracing::warn!(%endpoint, error = %e, id = %msg.id(), attempts = msg.attempts(), "request failed; requeueing");
                return HandlerResult::requeue();
            }
            if let Some(m) = self.per_address.get(i) {
                m.borrow_mut().status(took);
            }
        }
        self.aggregate.borrow_mut().status(start.elapsed());
        HandlerResult::Finish
    }
}

/// The program; the exit status.
pub fn main() -> i32 {
    let Some(opts) = start::options::<Options>(TOOL) else {
        return 0;
    };
    let headers = match parse_headers(&opts.header) {
        Ok(h) => h,
        Err(_) => return start::fatal(TOOL, "--header value format should be 'key=value'"),
    };
    if opts.topic.is_empty() || opts.channel.is_empty() {
        return start::fatal(TOOL, "--topic and --channel are required");
    }
    if let Some(ct) = &opts.content_type {
        if ct != DEFAULT_CONTENT_TYPE {
            if opts.post.is_empty() {
                return start::fatal(TOOL, "--content-type only used with --post");
            }
            if ct.is_empty() {
                return start::fatal(TOOL, "--content-type requires a value when used");
            }
        }
    }
    if opts.consumer.nsqd_tcp_address.is_empty() && opts.consumer.lookupd_http_address.is_empty() {
        return start::fatal(
            TOOL,
            "--nsqd-tcp-address or --lookupd-http-address required",
        );
    }
    if !opts.consumer.nsqd_tcp_address.is_empty() && !opts.consumer.lookupd_http_address.is_empty()
    {
        return start::fatal(
            TOOL,
            "use --nsqd-tcp-address or --lookupd-http-address not both",
        );
    }
    if opts.get.is_empty() && opts.post.is_empty() {
        return start::fatal(TOOL, "--get or --post required");
    }
    if !opts.get.is_empty() && !opts.post.is_empty() {
        return start::fatal(TOOL, "use --get or --post not both");
    }
    if opts.get.iter().any(|g| g.matches("%s").count() != 1) {
        return start::fatal(TOOL, "invalid GET address - must be a printf string");
    }
    if !(0.0..=1.0).contains(&opts.sample) {
        return start::fatal(TOOL, "ERROR: --sample must be between 0.0 and 1.0");
    }
    if opts.n == 0 {
        return start::fatal(TOOL, "-n must be at least 1");
    }
    let endpoints = if opts.post.is_empty() {
        opts.get.clone()
    } else {
        opts.post.clone()
    };
    for e in &endpoints {
        if let Err(m) = Url::parse(&e.replacen("%s", "", 1)) {
            return start::fatal(TOOL, format!("invalid address {m}"));
        }
    }
    let go = match GoConfig::parse(&opts.consumer.consumer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--consumer-opt: {e}")),
    };
    let tls = match tls_config(&opts, &endpoints) {
        Ok(t) => t,
        Err(e) => return start::fatal(TOOL, e),
    };
    start::run(TOOL, move |signals| {
        run(opts, go, endpoints, headers, tls, signals)
    })
}

/// The rustls settings when an endpoint is `https://`.
fn tls_config(
    opts: &Options,
    endpoints: &[String],
) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    if !endpoints.iter().any(|e| e.starts_with("https://")) {
        return Ok(None);
    }
    let mut t = TlsConfig::default().insecure_skip_verify(opts.tls_insecure_skip_verify);
    if let Some(ca) = &opts.tls_root_ca_file {
        t = t.root_ca_file(ca);
    }
    match (&opts.tls_cert, &opts.tls_key) {
        (Some(c), Some(k)) => t = t.client_cert(c, k),
        (None, None) => {}
        _ => return Err("--http-client-tls-cert and --http-client-tls-key go together".into()),
    }
    t.client_config().map(Some).map_err(|e| e.to_string())
}

async fn run(
    opts: Options,
    go: GoConfig,
    endpoints: Vec<String>,
    headers: Vec<(String, String)>,
    tls: Option<Arc<rustls::ClientConfig>>,
    signals: Signals,
) -> Result<(), String> {
    let per_address_every = if endpoints.len() == 1 {
        0
    } else {
        opts.status_every
    };
    let sender = Rc::new(Sender {
        per_address: endpoints
            .iter()
            .map(|a| RefCell::new(TimerMetrics::new(per_address_every, format!("[{a}]:"))))
            .collect(),
        pool: RefCell::new(Pool::new(
            Mode::parse(&opts.mode, Mode::All),
            endpoints.len(),
        )),
        get: opts.post.is_empty(),
        endpoints,
        content_type: opts
            .content_type
            .clone()
            .unwrap_or_else(|| DEFAULT_CONTENT_TYPE.into()),
        headers,
        user_agent: format!("{TOOL} v{}", protocol::NSQD_COMPAT_VERSION),
        client: Client::new(
            Timeouts {
                connect: opts.http_client_connect_timeout,
                request: opts.http_client_request_timeout,
            },
            tls,
        ),
        aggregate: RefCell::new(TimerMetrics::new(opts.status_every, "[aggregate]:")),
        sample: opts.sample,
        rng: Cell::new(u64::from(std::process::id()) << 20 | 0x9E37),
        slots: glommio::sync::Semaphore::new(opts.n as u64),
        metrics: Rc::new(Metrics::new(TOOL)),
    });
    if !opts.stats.stats_address.is_empty() {
        crate::stats_server::start(&opts.stats.stats_address, sender.metrics.clone())?;
    }
    let config = go
        .consumer(ConsumerConfig::new(
            opts.topic.as_str(),
            opts.channel.as_str(),
        ))
        .user_agent(cli::user_agent(TOOL))
        .max_in_flight(opts.consumer.max_in_flight);
    let handler_sender = sender.clone();
    let consumer = Consumer::new(config, move |msg: Message| {
        let sender = handler_sender.clone();
        async move { sender.metrics.observe(sender.handle(msg)).await }
    })
    .map_err(|e| e.to_string())?;
    consumer
        .connect_to_nsqds(opts.consumer.nsqd_tcp_address.clone())
        .await
        .map_err(|e| e.to_string())?;
    for l in &opts.consumer.lookupd_http_address {
        // As go-nsq: a lookup that does not answer yet is asked again every
        // lookupd_poll_interval; a long-running tool waits for it.
        if let Err(e) = consumer.connect_to_lookupd(l.clone()).await {
            tracing::warn!(lookupd = %l, error = %e, "lookupd query failed; retrying");
        }
    }
    signals.terminated().await;
    consumer.stop().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_query_escape_as_go() {
        let h = parse_headers(&["X-A: 1".into(), " k :v:w ".into()]).expect("headers");
        assert_eq!(h, [("X-A".into(), "1".into()), ("k".into(), "v:w".into())]);
        assert!(parse_headers(&["novalue".into()]).is_err());
        assert!(parse_headers(&["k: ".into()]).is_err());
        assert_eq!(query_escape(b"a b&c=d/\xff~"), "a+b%26c%3Dd%2F%FF~");
    }
}
