//! nsq_tail: prints the messages of one or more topics to stdout, as NSQ's nsq_tail does:
//! each body followed by `\n`, with `--print-topic` prefixed by `<topic> | `. The channel is
//! `tail<6 digits>#ephemeral` unless `--channel` is given; `-n N` stops after N messages of a
//! topic (each topic counts its own, as NSQ) and exits 0; SIGINT / SIGTERM stop cleanly.
//!
//! Invariants: a message is FINished only after its line was written to stdout; once a topic
//! reached `-n`, further deliveries are requeued unprinted.

use crate::cli::{self, go_bool, Signals};
use crate::cli::{ConsumerFlags, VersionFlag};
use crate::goconfig::GoConfig;
use clap::Parser;
use client::{Consumer, ConsumerConfig, HandlerResult, Message};
use std::cell::Cell;
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
    let mut opts: Options = cli::parse_args();
    if opts.v.version {
        println!("{}", cli::version_line(TOOL));
        return 0;
    }
    cli::init_logging(tracing::Level::WARN);
    if opts.channel.is_empty() {
        opts.channel = random_channel();
    }
    let fatal = |m: &str| {
        eprintln!("{TOOL}: {m}");
        1
    };
    if opts.consumer.nsqd_tcp_address.is_empty() && opts.consumer.lookupd_http_address.is_empty() {
        return fatal("--nsqd-tcp-address or --lookupd-http-address required");
    }
    if !opts.consumer.nsqd_tcp_address.is_empty() && !opts.consumer.lookupd_http_address.is_empty()
    {
        return fatal("use --nsqd-tcp-address or --lookupd-http-address not both");
    }
    if opts.topic.is_empty() {
        return fatal("--topic required");
    }
    let go = match GoConfig::parse(&opts.consumer.consumer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--consumer-opt: {e}")),
    };
    // Don't ask for more messages than we want.
    if opts.n > 0 && opts.n < opts.consumer.max_in_flight {
        opts.consumer.max_in_flight = opts.n;
    }
    let signals = match Signals::register() {
        Ok(s) => s,
        Err(e) => return fatal(&format!("installing signal handlers: {e}")),
    };
    let result = glommio::LocalExecutorBuilder::default()
        .name(TOOL)
        .spawn(move || async move { run(opts, go, signals).await });
    match result.map(|h| h.join()) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) | Err(e) => fatal(&e.to_string()),
    }
}

async fn run(opts: Options, go: GoConfig, signals: Signals) -> i32 {
    let done = Rc::new(Cell::new(false));
    let mut consumers = Vec::new();
    for topic in &opts.topic {
        eprintln!("Adding consumer for topic: {topic}");
        let config = go
            .consumer(ConsumerConfig::new(topic.as_str(), opts.channel.as_str()))
            .user_agent(cli::user_agent(TOOL))
            .max_in_flight(opts.consumer.max_in_flight);
        let shown = Rc::new(Cell::new(0u64));
        let (limit, prefix, done2) = (
            opts.n,
            opts.print_topic.then(|| topic.clone()),
            done.clone(),
        );
        let consumer = match Consumer::new(config, move |msg: Message| {
            let result = show(&msg, prefix.as_deref(), &shown, limit, &done2);
            async move { result }
        }) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{TOOL}: {e}");
                return 1;
            }
        };
        let connected = async {
            consumer
                .connect_to_nsqds(opts.consumer.nsqd_tcp_address.clone())
                .await?;
            for l in &opts.consumer.lookupd_http_address {
                consumer.connect_to_lookupd(l.clone()).await?;
            }
            Ok::<(), client::Error>(())
        };
        if let Err(e) = connected.await {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
        consumers.push(consumer);
    }
    while !signals.terminating() && !done.get() {
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    for c in &consumers {
        c.stop().await;
    }
    let _ = std::io::stdout().flush();
    0
}

/// Prints one message, counting toward `-n`.
fn show(
    msg: &Message,
    topic: Option<&str>,
    shown: &Cell<u64>,
    limit: u64,
    done: &Cell<bool>,
) -> HandlerResult {
    if limit > 0 && shown.get() >= limit {
        return HandlerResult::requeue_after(Duration::ZERO);
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out
        .write_all(&line(topic, msg.body()))
        .and_then(|_| out.flush())
    {
        eprintln!("{TOOL}: failed to write to os.Stdout - {e}");
        std::process::exit(1);
    }
    shown.set(shown.get() + 1);
    if limit > 0 && shown.get() >= limit {
        done.set(true);
    }
    HandlerResult::Finish
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
