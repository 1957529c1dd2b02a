//! nsq_to_nsq: consumes `--topic` (one or more) on `--channel` and publishes each message to
//! one of the `--destination-nsqd-tcp-address` brokers (chosen by `--mode`, [`crate::pool`]),
//! on `--destination-topic` or the topic it came from, through the JSON filters of
//! [`crate::jsonfilter`]. Every `--status-every` publishes a status line goes to stderr
//! (`[aggregate]:`, and per destination when there are several).
//!
//! Invariants: a message is FINished only after its destination answered `OK` to the PUB; a
//! failed publish (destination down, an error answer, a timeout) REQueues it with backoff
//! (go-nsq's `Requeue(-1)`: the delay grows with its attempts, the consumer slows down). A
//! destination is connected on its first publish and again after a failure, so the tool starts
//! while a destination is down. SIGINT / SIGTERM stop the consumers (publishes under way end
//! first), then exit 0.

use crate::cli::{self, Signals};
use crate::cli::{ConsumerFlags, ProducerFlags, StatsFlag, VersionFlag};
use crate::goconfig::GoConfig;
use crate::jsonfilter::{Filter, Verdict};
use crate::metrics::Metrics;
use crate::pool::{Mode, Pool, TimerMetrics};
use crate::start::{self, ToolOptions};
use clap::Parser;
use client::{Consumer, ConsumerConfig, HandlerResult, Message, Producer, ProducerConfig};
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

const TOOL: &str = "nsq_to_nsq";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "nsq_to_nsq",
    about = "Republishes NSQ topics to other brokers (NSQ's nsq_to_nsq)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Options {
    #[command(flatten)]
    pub v: VersionFlag,
    /// nsq channel
    #[arg(long, default_value = "nsq_to_nsq")]
    pub channel: String,
    /// use this destination topic for all consumed topics (default is consumed topic name)
    #[arg(long = "destination-topic", default_value = "")]
    pub destination_topic: String,
    /// the # of requests between logging status (per destination), 0 disables
    #[arg(long = "status-every", default_value_t = 250)]
    pub status_every: usize,
    /// the upstream request mode options: round-robin, hostpool (default), epsilon-greedy
    #[arg(long, default_value = "hostpool")]
    pub mode: String,
    /// destination nsqd TCP address (may be given multiple times)
    #[arg(long = "destination-nsqd-tcp-address")]
    pub destination_nsqd_tcp_address: Vec<String>,
    /// nsq topic (may be given multiple times)
    #[arg(long)]
    pub topic: Vec<String>,
    /// for JSON messages: pass this field (may be given multiple times)
    #[arg(long = "whitelist-json-field")]
    pub whitelist_json_field: Vec<String>,
    /// for JSON messages: only pass messages that contain this field
    #[arg(long = "require-json-field", default_value = "")]
    pub require_json_field: String,
    /// for JSON messages: only pass messages in which the required field has this value
    #[arg(long = "require-json-value", default_value = "")]
    pub require_json_value: String,
    #[command(flatten)]
    pub consumer: ConsumerFlags,
    #[command(flatten)]
    pub producer: ProducerFlags,
    #[command(flatten)]
    pub stats: StatsFlag,
}

impl ToolOptions for Options {
    fn version(&self) -> bool {
        self.v.version
    }
}

/// One destination broker, connected on first use.
struct Destination {
    addr: String,
    config: ProducerConfig,
    producer: RefCell<Option<Producer>>,
    connecting: glommio::sync::Semaphore,
    status: RefCell<TimerMetrics>,
}

impl Destination {
    async fn publish(&self, topic: &str, body: bytes::Bytes) -> client::Result<()> {
        let producer = self.producer().await?;
        producer.publish(topic, body).await
    }

    async fn producer(&self) -> client::Result<Producer> {
        if let Some(p) = self.producer.borrow().as_ref() {
            return Ok(p.clone());
        }
        let _permit = self
            .connecting
            .acquire_permit(1)
            .await
            .map_err(|_| client::Error::Closed)?;
        if let Some(p) = self.producer.borrow().as_ref() {
            return Ok(p.clone());
        }
        let p = Producer::connect_with(self.addr.as_str(), self.config.clone()).await?;
        *self.producer.borrow_mut() = Some(p.clone());
        Ok(p)
    }
}

/// What every handler shares.
struct Relay {
    destinations: Vec<Destination>,
    pool: RefCell<Pool>,
    filter: Filter,
    aggregate: RefCell<TimerMetrics>,
    /// `--stats-address`'s counters.
    metrics: Rc<Metrics>,
}

impl Relay {
    async fn handle(&self, msg: Message, topic: &str) -> HandlerResult {
        let body = match self.filter.apply(msg.body()) {
            Verdict::Pass(b) => b,
            Verdict::Drop => return HandlerResult::Finish,
            Verdict::Backoff => {
                self.metrics.error("filter");
                return HandlerResult::requeue();
            }
        };
        let start = Instant::now();
        let i = self.pool.borrow_mut().pick(start);
        let Some(dest) = self.destinations.get(i) else {
            self.metrics.error("no_destination");
            return HandlerResult::requeue();
        };
        let result = dest.publish(topic, body).await;
        let took = start.elapsed();
        self.pool
            .borrow_mut()
            .mark(i, result.is_ok(), took, Instant::now());
        dest.status.borrow_mut().status(took);
        self.aggregate.borrow_mut().status(took);
        match result {
            Ok(()) => HandlerResult::Finish,
            Err(e) => {
                self.metrics.error("publish");
                tracing::warn!(destination = %dest.addr, error = %e, id = %msg.id(), "publish failed; requeueing");
                HandlerResult::requeue()
            }
        }
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
    if opts.topic.iter().any(|t| !is_valid_topic_name(t)) {
        return start::fatal(TOOL, "--topic is invalid");
    }
    if !opts.destination_topic.is_empty() && !is_valid_topic_name(&opts.destination_topic) {
        return start::fatal(TOOL, "--destination-topic is invalid");
    }
    if !is_valid_channel_name(&opts.channel) {
        return start::fatal(TOOL, "--channel is invalid");
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
    if opts.destination_nsqd_tcp_address.is_empty() {
        return start::fatal(TOOL, "--destination-nsqd-tcp-address required");
    }
    let consumer_go = match GoConfig::parse(&opts.consumer.consumer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--consumer-opt: {e}")),
    };
    let producer_go = match GoConfig::parse(&opts.producer.producer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--producer-opt: {e}")),
    };
    start::run(TOOL, move |signals| {
        run(opts, consumer_go, producer_go, signals)
    })
}

async fn run(
    opts: Options,
    consumer_go: GoConfig,
    producer_go: GoConfig,
    signals: Signals,
) -> Result<(), String> {
    let ua = cli::user_agent(TOOL);
    let producer_config = producer_go
        .producer(ProducerConfig::new())
        .user_agent(ua.clone());
    let dests = &opts.destination_nsqd_tcp_address;
    let per_address_every = if dests.len() == 1 {
        0
    } else {
        opts.status_every
    };
    let destinations = dests
        .iter()
        .map(|a| Destination {
            addr: a.clone(),
            config: producer_config.clone(),
            producer: RefCell::new(None),
            connecting: glommio::sync::Semaphore::new(1),
            status: RefCell::new(TimerMetrics::new(per_address_every, format!("[{a}]:"))),
        })
        .collect();
    let relay = Rc::new(Relay {
        destinations,
        pool: RefCell::new(Pool::new(
            Mode::parse(&opts.mode, Mode::RoundRobin),
            dests.len(),
        )),
        filter: Filter {
            require_field: opts.require_json_field.clone(),
            require_value: opts.require_json_value.clone(),
            whitelist: opts.whitelist_json_field.clone(),
        },
        aggregate: RefCell::new(TimerMetrics::new(opts.status_every, "[aggregate]:")),
        metrics: Rc::new(Metrics::new(TOOL)),
    });
    if !opts.stats.stats_address.is_empty() {
        crate::stats_server::start(&opts.stats.stats_address, relay.metrics.clone())?;
    }
    let mut consumers = Vec::new();
    for topic in &opts.topic {
        let config = consumer_go
            .consumer(ConsumerConfig::new(topic.as_str(), opts.channel.as_str()))
            .user_agent(ua.clone())
            .max_in_flight(opts.consumer.max_in_flight);
        let publish_topic: Rc<str> = if opts.destination_topic.is_empty() {
            topic.as_str().into()
        } else {
            opts.destination_topic.as_str().into()
        };
        let relay = relay.clone();
        let consumer = Consumer::new(config, move |msg: Message| {
            let (relay, topic) = (relay.clone(), publish_topic.clone());
            async move { relay.metrics.observe(relay.handle(msg, &topic)).await }
        })
        .map_err(|e| e.to_string())?;
        consumers.push(consumer);
    }
    for consumer in &consumers {
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
    }
    signals.terminated().await;
    for c in &consumers {
        c.stop().await;
    }
    for d in &relay.destinations {
        if let Some(p) = d.producer.borrow().as_ref() {
            p.stop();
        }
    }
    Ok(())
}
