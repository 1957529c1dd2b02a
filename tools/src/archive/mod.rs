//! nsq_to_file: archives topics to files, one consumer and one output file per topic.
//!
//! - [`options`]: the command line (NSQ's flags, defaults and checks);
//! - [`file`]: the output file on a blocking thread (rotation, gzip members or zstd
//!   frames, sync, moving);
//! - [`topic`]: a topic's consumer and writer task (FIN only after the sync);
//! - [`leftover`]: files a killed run left in the work dir, finished and moved at start-up.
//!
//! [`run`] starts one [`topic::Topic`] per `--topic`, or per topic the lookups list that
//! matches `--topic-pattern` (asked at start and every `--topic-refresh`), and on SIGINT or
//! SIGTERM stops them all: each finishes what is in flight (written, synced, FINished), then
//! closes and moves its file. SIGHUP closes every file (the next message opens a new one).

pub mod file;
pub mod leftover;
pub mod options;
pub mod topic;

use crate::cli::{self, Signals};
use crate::filename::{FilenameFormat, FormatOptions};
use crate::goconfig::GoConfig;
use crate::metrics::Metrics;
use crate::start;
use file::{FileSettings, OutputFile};
use options::Options;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};
use topic::Topic;

const TOOL: &str = "nsq_to_file";

/// The program: parses the command line, runs until SIGINT / SIGTERM; the exit status.
pub fn main() -> i32 {
    let Some(mut opts) = start::options::<Options>(TOOL) else {
        return 0;
    };
    if let Err(e) = opts.check().and_then(|_| opts.prepare_dirs()) {
        return start::fatal(TOOL, e);
    }
    let go = match GoConfig::parse(&opts.consumer.consumer_opt) {
        Ok(g) => g,
        Err(e) => cli::fail(TOOL, format!("--consumer-opt: {e}")),
    };
    // Blocking threads: one writes a topic's batches while others fdatasync the ones before
    // (`topic::MAX_SYNCS` under way at once).
    let pool = glommio::PoolPlacement::Unbound(topic::MAX_SYNCS + 1);
    start::run_with(
        TOOL,
        |b| b.blocking_thread_pool_placement(pool),
        move |signals| run(opts, go, signals),
    )
}

/// Everything inside the executor.
async fn run(opts: Options, go: GoConfig, signals: Signals) -> i32 {
    let pattern = match regex::Regex::new(&opts.topic_pattern) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{TOOL}: invalid --topic-pattern: {e}");
            return 1;
        }
    };
    let metrics = Rc::new(Metrics::new(TOOL));
    if !opts.stats.stats_address.is_empty() {
        if let Err(e) = crate::stats_server::start(&opts.stats.stats_address, metrics.clone()) {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
    }
    let mut topics: BTreeMap<String, Rc<Topic>> = BTreeMap::new();
    let discover = opts.topic.is_empty();
    let mut next_refresh = Instant::now();
    // The first round of topics starts (and finishes the work dir's leftovers) even when a
    // signal came during start-up; they stop right after.
    let mut first = true;
    loop {
        if signals.terminating() && !first {
            break;
        }
        first = false;
        if signals.take_hup() {
            for t in topics.values() {
                t.hup();
            }
        }
        let now = Instant::now();
        if now >= next_refresh {
            let wanted = if discover {
                next_refresh = now + opts.topic_refresh;
                lookup_topics(&opts).await
            } else {
                next_refresh = now + Duration::from_secs(3600 * 24 * 365);
                opts.topic.clone()
            };
            for name in wanted {
                if topics.contains_key(&name) {
                    continue;
                }
                if !pattern.is_match(&name) {
                    tracing::warn!(topic = %name, pattern = %opts.topic_pattern, "skipping topic (doesn't match pattern)");
                    continue;
                }
                match start_topic(&opts, &go, &name, &metrics).await {
                    Ok(t) => {
                        topics.insert(name, t);
                    }
                    Err(e) => {
                        tracing::error!(topic = %name, error = %e, "couldn't create logger for new topic");
                        if !discover {
                            eprintln!("{TOOL}: topic {name}: {e}");
                            return 1;
                        }
                    }
                }
            }
        }
        glommio::timer::sleep(Duration::from_millis(50)).await;
    }
    tracing::info!(
        topics = topics.len(),
        "stopping: finishing the messages in flight"
    );
    let stops: Vec<_> = topics
        .values()
        .map(|t| {
            let t = t.clone();
            glommio::spawn_local(async move { t.stop().await })
        })
        .collect();
    for s in stops {
        s.await;
    }
    0
}

/// Every topic the lookups know (the union; a lookup that fails is logged and skipped).
async fn lookup_topics(opts: &Options) -> Vec<String> {
    let timeout = opts.http_client_connect_timeout + opts.http_client_request_timeout;
    let mut all = std::collections::BTreeSet::new();
    for lookupd in &opts.consumer.lookupd_http_address {
        match client::lookup::topics(lookupd, timeout).await {
            Ok(t) => all.extend(t),
            Err(e) => tracing::error!(lookupd, error = %e, "could not retrieve topic list"),
        }
    }
    all.into_iter().collect()
}

/// Finishes the topic's leftovers, then starts its consumer and writer.
async fn start_topic(
    opts: &Options,
    go: &GoConfig,
    name: &str,
    metrics: &Rc<Metrics>,
) -> Result<Rc<Topic>, String> {
    let format_opts = FormatOptions {
        filename_format: &opts.filename_format,
        host_identifier: &opts.host_identifier,
        datetime_format: &opts.datetime_format,
        compressed_ext: opts.compression().extension(),
        rotating: opts.rotating(),
        separate_work_dir: opts.separate_work_dir(),
    };
    let format = FilenameFormat::new(
        &format_opts,
        name,
        &nsq_common::hostname(),
        std::process::id(),
    )?;
    if opts.separate_work_dir() {
        let (topic, work, out, f) = (
            name.to_string(),
            opts.work_dir.clone(),
            opts.output_dir.clone(),
            format.clone(),
        );
        glommio::executor()
            .spawn_blocking(move || leftover::recover(&topic, &work, &out, &f))
            .await
            .map_err(|e| format!("finishing files left in --work-dir: {e}"))?;
    }
    let settings = FileSettings {
        topic: name.to_string(),
        output_dir: opts.output_dir.clone(),
        work_dir: opts.work_dir.clone(),
        compression: opts.compression(),
        rotate_size: opts.rotate_size.max(0) as u64,
        rotate_interval: opts.rotate_interval,
        skip_empty_files: opts.skip_empty_files,
    };
    let config = go
        .consumer(client::ConsumerConfig::new(name, &opts.channel))
        .user_agent(cli::user_agent(TOOL))
        .max_in_flight(opts.consumer.max_in_flight);
    config.validate().map_err(|e| e.to_string())?;
    Topic::start(
        config,
        OutputFile::new(settings, format),
        opts.sync_interval,
        opts.consumer.nsqd_tcp_address.clone(),
        opts.consumer.lookupd_http_address.clone(),
        metrics.clone(),
    )
    .map_err(|e| e.to_string())
}
