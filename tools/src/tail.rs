//! nsq_tail: prints the messages of one or more topics to stdout, as NSQ's nsq_tail does:
//! each body followed by `\n`, with `--print-topic` prefixed by `<topic> | `. The channel is
//! `tail<6 digits>#ephemeral` unless `--channel` is given; `-n N` stops after N messages of a
//! topic (each topic counts its own, as NSQ) and exits 0; SIGINT / SIGTERM stop cleanly.
//!
//! Invariants: a message is FINished only after its line was written to stdout (or given up
//! past go-nsq's `max_attempts`, as go-nsq's consumer does, before `-n` is reached). Once a
//! topic reached `-n` the tool takes no more: RDY 0 at once, every delivery still arriving is
//! released unanswered ([`client::Pending::release`]), and the consumers stop, so what they
//! held goes back to the channel with no attempt spent on a REQ and nothing FINished unprinted.

use crate::cli::{self, go_bool, Signals};
use crate::cli::{ConsumerFlags, VersionFlag};
use crate::goconfig::GoConfig;
use crate::start::{self, ToolOptions};
use clap::Parser;
use client::{Consumer, ConsumerConfig, Message, Pending};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::rc::Rc;
use std::time::Duration;

const TOOL: &str = "nsq_tail";

#[derive(Parser, Debug, Clone)]
#[command(
    name = "nsq_tail",
    about = "Prints the messages of NSQ topics (NSQ's nsq_tail)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct Options {
    #[command(flatten)]
    pub v: VersionFlag,
    /// NSQ channel
    #[arg(long, default_value = "")]
    pub channel: String,
    /// total messages to show (will wait if starved)
    #[arg(long = "n", default_value_t = 0)]
    pub n: u64,
    /// print topic name where message was received
    #[arg(long = "print-topic", value_parser = go_bool, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    pub print_topic: bool,
    /// NSQ topic (may be given multiple times)
    #[arg(long)]
    pub topic: Vec<String>,
    #[command(flatten)]
    pub consumer: ConsumerFlags,
}

impl ToolOptions for Options {
    fn version(&self) -> bool {
        self.v.version
    }
}

/// NSQ's default channel: `tail` and six random digits, ephemeral.
pub fn random_channel() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("tail{:06}#ephemeral", h.finish() % 999_999)
}

/// One output line: `[topic | ]body\n`.
pub fn line(topic: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 1 + topic.map_or(0, |t| t.len() + 3));
    if let Some(t) = topic {
        out.extend_from_slice(t.as_bytes());
        out.extend_from_slice(b" | ");
    }
    out.extend_from_slice(body);
    out.push(b'\n');
    out
}

/// The program; the exit status.
pub fn main() -> i32 {
    let Some(mut opts) = start::options::<Options>(TOOL) else {
        return 0;
    };
    if opts.channel.is_empty() {
        opts.channel = random_channel();
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
    if opts.topic.is_empty() {
        return start::fatal(TOOL, "--topic required");
    }
    let go = match GoConfig::parse(&opts.consumer.consumer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--consumer-opt: {e}")),
    };
    // Don't ask for more messages than we want.
    if opts.n > 0 && opts.n < opts.consumer.max_in_flight {
        opts.consumer.max_in_flight = opts.n;
    }
    start::run(TOOL, move |signals| run(opts, go, signals))
}

async fn run(opts: Options, go: GoConfig, signals: Signals) -> i32 {
    let done = Rc::new(Cell::new(false));
    let mut consumers = Vec::new();
    // Each handler's way to its own consumer (RDY 0 from inside the handler at `-n`); emptied
    // at the end, which ends the cycle consumer -> handler -> consumer.
    let mut selves: Vec<Rc<RefCell<Option<Consumer>>>> = Vec::new();
    for topic in &opts.topic {
        eprintln!("Adding consumer for topic: {topic}");
        let config = go
            .consumer(ConsumerConfig::new(topic.as_str(), opts.channel.as_str()))
            .user_agent(cli::user_agent(TOOL))
            .max_in_flight(opts.consumer.max_in_flight);
        // The handler applies go-nsq's max_attempts itself: past `-n` a message is released,
        // never given up (FINished) unprinted.
        let max_attempts = config.max_attempts;
        let config = config.max_attempts(0);
        let me: Rc<RefCell<Option<Consumer>>> = Rc::default();
        let tail = Tail {
            topic: opts.print_topic.then(|| topic.clone()),
            limit: opts.n,
            max_attempts,
            shown: Cell::new(0),
            done: done.clone(),
            consumer: me.clone(),
        };
        let consumer =
            match Consumer::new_deferred(config, move |msg, answer| tail.handle(&msg, answer)) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{TOOL}: {e}");
                    return 1;
                }
            };
        *me.borrow_mut() = Some(consumer.clone());
        selves.push(me);
        if let Err(e) = consumer
            .connect_to_nsqds(opts.consumer.nsqd_tcp_address.clone())
            .await
        {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
        for l in &opts.consumer.lookupd_http_address {
            // As go-nsq: a lookup that does not answer yet is asked again every
            // lookupd_poll_interval; a long-running tool waits for it.
            if let Err(e) = consumer.connect_to_lookupd(l.clone()).await {
                tracing::warn!(lookupd = %l, topic = %topic, error = %e, "lookupd query failed; retrying");
            }
        }
        consumers.push(consumer);
    }
    while !signals.terminating() && !done.get() {
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    for c in &consumers {
        c.set_max_in_flight(0);
    }
    for c in &consumers {
        c.stop().await;
    }
    for me in &selves {
        me.borrow_mut().take();
    }
    let _ = std::io::stdout().flush();
    0
}

/// One topic's handler: prints, counts toward `-n`, and once the tool is done takes nothing.
struct Tail {
    /// `--print-topic`'s prefix.
    topic: Option<String>,
    /// `-n` (0: no limit).
    limit: u64,
    /// go-nsq's `max_attempts` (0: never give up).
    max_attempts: u16,
    shown: Cell<u64>,
    /// Set when any topic reached `-n`: the whole tool stops, as NSQ's exits.
    done: Rc<Cell<bool>>,
    consumer: Rc<RefCell<Option<Consumer>>>,
}

impl Tail {
    fn handle(&self, msg: &Message, answer: Pending) {
        if self.done.get() {
            answer.release();
            return;
        }
        if self.max_attempts > 0 && msg.attempts() > self.max_attempts {
            tracing::warn!(id = %msg.id(), attempts = msg.attempts(), "giving up on message");
            answer.finish();
            return;
        }
        let mut out = std::io::stdout().lock();
        if let Err(e) = out
            .write_all(&line(self.topic.as_deref(), msg.body()))
            .and_then(|_| out.flush())
        {
            eprintln!("{TOOL}: failed to write to os.Stdout - {e}");
            std::process::exit(1);
        }
        self.shown.set(self.shown.get() + 1);
        if self.limit > 0 && self.shown.get() >= self.limit {
            self.done.set(true);
            // RDY 0 goes out ahead of this message's FIN: the broker sends nothing more.
            if let Some(c) = self.consumer.borrow().as_ref() {
                c.set_max_in_flight(0);
            }
        }
        answer.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_channel_as_nsq() {
        assert_eq!(line(None, b"hello"), b"hello\n");
        assert_eq!(line(Some("t"), b"x y"), b"t | x y\n");
        let c = random_channel();
        assert!(
            c.starts_with("tail") && c.ends_with("#ephemeral") && c.len() == 20,
            "{c}"
        );
    }
}
