//! The sampler behind [`crate::rates`]: a thread that, every `--sample-interval`, reads every
//! node's `/stats?format=json` as a page does (the lookups' producers and the
//! `--nsqd-http-address` brokers, through [`crate::cluster`] and its upstream client, TLS
//! settings included) and records the round in the shared [`Store`].
//!
//! Invariants: rounds start on a fixed schedule (start + k × interval; a round that takes
//! longer than the interval makes the next start at once, never two at a time); the store's
//! lock is held only while a round is recorded or an answer built, never while asking the
//! cluster.

use crate::cluster::Cluster;
use crate::rates::Store;
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
    let origin = Instant::now();
    let mut next = origin;
    loop {
        let (g, hosts) = cluster.stats(None);
        let mono = origin.elapsed().as_secs_f64();
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let known: Vec<String> = hosts.into_keys().collect();
        for w in &g.warnings {
            tracing::debug!("rates: {w}");
        }
        match store.lock() {
            Ok(mut s) => s.record(now_ms, mono, &known, &g.answers, g.warnings.is_empty()),
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
