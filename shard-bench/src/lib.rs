//! `shard-bench`: the load tool for NSQ-compatible brokers (ours or nsqd).
//!
//! It drives publishers and consumers built on the [`client`] crate, measures throughput,
//! publish-acknowledgement latency and end-to-end latency (HDR histograms), the broker's CPU
//! per message and its peak memory, and turns results into tables and charts.
//!
//! - [`options`]: the command line and its checks;
//! - [`runner`]: one run, its executors, phases and progress line;
//! - [`publisher`], [`subscriber`]: the two sides of the load, on `client::Producer` and
//!   `client::Consumer`; [`blocking_pub`]: `--blocking` publishers on plain threads;
//! - [`sink`]: the trivial in-process broker `raw` measures against (the ceiling);
//!   [`keep`]: its disk, the ceiling of a broker that keeps a topic on disk;
//! - [`payload`]: message bodies stamped with their send time;
//! - [`metrics`]: counters and histograms while running; [`procstat`]: the broker's CPU and RSS;
//! - [`result`]: the result (JSON, summary, targets); [`report`]: markdown table and SVG charts;
//! - [`compare`]: one workload against several broker commands, alternately, with medians.

pub mod blocking_pub;
pub mod compare;
pub mod error;
pub mod keep;
pub mod metrics;
pub mod options;
pub mod payload;
pub mod procstat;
pub mod publisher;
pub mod report;
pub mod result;
pub mod runner;
pub mod sink;
pub mod subscriber;

pub use error::{BenchError, Result};
