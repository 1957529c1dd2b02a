//! The sampler behind [`crate::rates`]: a thread that, every `--sample-interval`, reads every
//! node's `/stats?format=json` as a page does (the lookups' producers and the
//! `--nsqd-http-address` brokers, through [`crate::cluster`] and its upstream client, TLS
//! settings included), all at once, and records the round in the shared [`Store`].
//!
//! Invariants: rounds start on a fixed schedule (start + k × interval; a round that takes
//! longer than the interval makes the next start at once, never two at a time); each node's
//! reading is timed by its own request (the middle of its send and its answer), so one slow
//! node does not skew the others' rates; the store's lock is held only while a round is
//! recorded or an answer built, never while asking the cluster.

use crate::cluster::{gather, Cluster};
use crate::rates::Store;
use crate::wire::Stats;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Starts the sampler thread; its store is returned.
pub fn start(cluster: Arc<Cluster>, interval: Duration) -> Result<Arc<Mutex<Store>>, String> {
    let store = Arc::new(Mutex::new(Store::new(interval)));
    let shared = store.clone();
    std::thread::Builder::new()
        .name("admin-sampler".into())
        .spawn(move || run(&cluster, &shared, interval))
        .map_err(|e| format!("cannot start the rates sampler: {e}"))?;
    tracing::info!(?interval, "rates: sampling every node's /stats");
    Ok(store)
}

fn run(cluster: &Cluster, store: &Mutex<Store>, interval: Duration) {
    // Its requests (every node's /stats each interval) are logged at debug only.
    crate::upstream::set_quiet_here(true);
    let origin = Instant::now();
    let mut next = origin;
    loop {
        let (hosts, mut warnings) = cluster.node_hosts();
        let names: Vec<String> = hosts.keys().cloned().collect();
        let g = gather(&names, |n| {
            let sent = origin.elapsed().as_secs_f64();
            let stats: Stats = cluster.upstream.get_json(n, "/stats?format=json")?;
            let answered = origin.elapsed().as_secs_f64();
            Ok::<_, crate::upstream::UpstreamError>((stats, (sent + answered) / 2.0))
        });
        warnings.extend(g.warnings);
        let answers: Vec<(String, Stats, f64)> = g
            .answers
            .into_iter()
            .map(|(n, (v, at))| (n, v, at))
            .collect();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        for w in &warnings {
            tracing::debug!("rates: {w}");
        }
        match store.lock() {
            Ok(mut s) => s.record(now_ms, &names, &answers, warnings.is_empty()),
            Err(_) => {
                tracing::error!("rates: the store's lock is poisoned; sampling stops");
                return;
            }
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}
