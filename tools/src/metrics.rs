//! What a long-running tool (nsq_to_file, nsq_to_nsq, nsq_to_http) counts for `--stats-address`,
//! and its rendering in Prometheus' text format (version 0.0.4).
//!
//! Invariants: counters only grow; `in_flight` is messages received whose handler has not
//! ended (each [`Metrics::observe`] adds one at the start and takes it off at the end, whatever
//! the result), so `received = finished + requeued + in_flight` at every scrape. One executor
//! owns the counters (`Rc`, `Cell`): the handlers and the listener run on it.

use client::HandlerResult;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;

/// The counters of one tool process.
#[derive(Debug)]
pub struct Metrics {
    tool: &'static str,
    received: Cell<u64>,
    finished: Cell<u64>,
    requeued: Cell<u64>,
    in_flight: Cell<u64>,
    /// Errors by kind (`publish`, `http`, `write`, ...).
    errors: RefCell<BTreeMap<&'static str, u64>>,
}

impl Metrics {
    pub fn new(tool: &'static str) -> Metrics {
        Metrics {
            tool,
            received: Cell::new(0),
            finished: Cell::new(0),
            requeued: Cell::new(0),
            in_flight: Cell::new(0),
            errors: RefCell::new(BTreeMap::new()),
        }
    }

    /// Runs a message's handler, counting it received, in flight, then finished or requeued.
    pub async fn observe(&self, handler: impl Future<Output = HandlerResult>) -> HandlerResult {
        self.received(1);
        let result = handler.await;
        self.answered(1, result);
        result
    }

    /// Counts `n` messages received (and in flight until [`Metrics::answered`]); for handlers
    /// that hold messages and answer them later in batches.
    pub fn received(&self, n: u64) {
        add(&self.received, n);
        add(&self.in_flight, n);
    }

    /// Counts `n` messages [`Metrics::received`] earlier as answered with `result`.
    pub fn answered(&self, n: u64, result: HandlerResult) {
        self.in_flight.set(self.in_flight.get().saturating_sub(n));
        match result {
            HandlerResult::Finish => add(&self.finished, n),
            HandlerResult::Requeue { .. } => add(&self.requeued, n),
        }
    }

    /// Counts one error of `kind`.
    pub fn error(&self, kind: &'static str) {
        *self.errors.borrow_mut().entry(kind).or_insert(0) += 1;
    }

    /// The Prometheus text exposition of the counters.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let tool = self.tool;
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{tool=\"{tool}\"}} {value}\n"
            );
        };
        metric(
            "nsq_tool_messages_received_total",
            "counter",
            "Messages delivered to the tool's handler.",
            self.received.get(),
        );
        metric(
            "nsq_tool_messages_finished_total",
            "counter",
            "Messages handled and FINished.",
            self.finished.get(),
        );
        metric(
            "nsq_tool_messages_requeued_total",
            "counter",
            "Messages REQueued (not handled this time).",
            self.requeued.get(),
        );
        metric(
            "nsq_tool_messages_in_flight",
            "gauge",
            "Lag as the tool sees it: messages received and not yet finished or requeued.",
            self.in_flight.get(),
        );
        let _ = write!(
            out,
            "# HELP nsq_tool_errors_total Errors by kind.\n# TYPE nsq_tool_errors_total counter\n"
        );
        for (kind, n) in self.errors.borrow().iter() {
            let _ = writeln!(
                out,
                "nsq_tool_errors_total{{tool=\"{tool}\",kind=\"{kind}\"}} {n}"
            );
        }
        out
    }
}

fn add(c: &Cell<u64>, n: u64) {
    c.set(c.get().saturating_add(n));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_renders() {
        let m = Metrics::new("nsq_to_x");
        let run = |r: HandlerResult| futures_lite::future::block_on(m.observe(async { r }));
        run(HandlerResult::Finish);
        run(HandlerResult::Finish);
        run(HandlerResult::requeue());
        m.error("publish");
        m.error("publish");
        let text = m.render();
        for line in [
            "nsq_tool_messages_received_total{tool=\"nsq_to_x\"} 3\n",
            "nsq_tool_messages_finished_total{tool=\"nsq_to_x\"} 2\n",
            "nsq_tool_messages_requeued_total{tool=\"nsq_to_x\"} 1\n",
            "nsq_tool_messages_in_flight{tool=\"nsq_to_x\"} 0\n",
            "nsq_tool_errors_total{tool=\"nsq_to_x\",kind=\"publish\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }
}
