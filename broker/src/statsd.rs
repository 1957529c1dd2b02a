//! The statsd wire, as nsqd writes it: the metric names and types nsqd pushes for each topic
//! and channel (from the same figures as /stats), counters sent as the difference since the
//! previous push, and the lines packed into UDP packets of at most `--statsd-udp-packet-size`
//! bytes. Pure: no socket, no clock; the push task is `shard::statsd_push`.
//!
//! Invariants: a line is never split across packets; a packet holds whole lines and is no
//! larger than the packet size, except a single line longer than it, which goes alone (as
//! nsqd's buffered writer sends it). A counter never goes negative: a count lower than at the
//! previous push (a topic deleted and made again) is sent whole.

use crate::stats::{ChannelStats, Latency, TopicStats};
use std::collections::HashMap;
use std::fmt::Write;

/// The counters of the previous push, by topic (and channel), for the differences.
#[derive(Debug, Default)]
pub struct Previous {
    topics: HashMap<String, PreviousTopic>,
}

#[derive(Debug, Default)]
struct PreviousTopic {
    message_count: u64,
    message_bytes: u64,
    channels: HashMap<String, PreviousChannel>,
}

#[derive(Debug, Default, Clone, Copy)]
struct PreviousChannel {
    message_count: u64,
    requeue_count: u64,
    timeout_count: u64,
    dead_lettered_count: u64,
}

/// A counter's increase since `before` (the whole count when it went down: a reset).
fn increase(now: u64, before: u64) -> u64 {
    now.checked_sub(before).unwrap_or(now)
}

/// Appends one line `<prefix><name>:<value>|<kind>\n`.
fn line(
    out: &mut Vec<String>,
    prefix: &str,
    name: std::fmt::Arguments<'_>,
    value: i128,
    kind: &str,
) {
    let mut s = String::with_capacity(prefix.len() + 64);
    s.push_str(prefix);
    let _ = s.write_fmt(name);
    let _ = writeln!(s, ":{value}|{kind}");
    out.push(s);
}

fn is_ephemeral(name: &str) -> bool {
    name.ends_with("#ephemeral")
}

/// The latency gauges `<base>.e2e_processing_latency_<pp>` (nsqd rounds quantile x 100).
fn latency_lines(out: &mut Vec<String>, prefix: &str, base: &str, latency: &Latency) {
    for p in latency.percentiles.iter().flatten() {
        let pp = (p.quantile * 100.0).round();
        line(
            out,
            prefix,
            format_args!("{base}.e2e_processing_latency_{pp:.0}"),
            p.value as i128,
            "g",
        );
    }
}

/// The lines of one push for `topics` (every name and type nsqd sends), and the counters to
/// remember for the next one. `prefix` already carries its trailing dot (or is empty).
pub fn topic_lines(
    topics: &[TopicStats],
    previous: &Previous,
    prefix: &str,
    exclude_ephemeral: bool,
) -> (Vec<String>, Previous) {
    let mut out = Vec::new();
    let mut next = Previous::default();
    for t in topics {
        if exclude_ephemeral && is_ephemeral(&t.topic_name) {
            continue;
        }
        let name = &t.topic_name;
        let before = previous.topics.get(name);
        let (count0, bytes0) = before.map_or((0, 0), |b| (b.message_count, b.message_bytes));
        let base = format!("topic.{name}");
        line(
            &mut out,
            prefix,
            format_args!("{base}.message_count"),
            increase(t.message_count, count0) as i128,
            "c",
        );
        line(
            &mut out,
            prefix,
            format_args!("{base}.message_bytes"),
            increase(t.message_bytes, bytes0) as i128,
            "c",
        );
        line(
            &mut out,
            prefix,
            format_args!("{base}.depth"),
            t.depth as i128,
            "g",
        );
        line(
            &mut out,
            prefix,
            format_args!("{base}.backend_depth"),
            t.backend_depth as i128,
            "g",
        );
        latency_lines(&mut out, prefix, &base, &t.e2e_processing_latency);
        let mut remembered = PreviousTopic {
            message_count: t.message_count,
            message_bytes: t.message_bytes,
            channels: HashMap::new(),
        };
        for c in &t.channels {
            if exclude_ephemeral && is_ephemeral(&c.channel_name) {
                continue;
            }
            let was = before
                .and_then(|b| b.channels.get(&c.channel_name))
                .copied()
                .unwrap_or_default();
            channel_lines(&mut out, prefix, &base, c, was);
            remembered.channels.insert(
                c.channel_name.clone(),
                PreviousChannel {
                    message_count: c.message_count,
                    requeue_count: c.requeue_count,
                    timeout_count: c.timeout_count,
                    dead_lettered_count: c
                        .dead_letters
                        .as_ref()
                        .map_or(0, |d| d.dead_lettered_count),
                },
            );
        }
        next.topics.insert(name.clone(), remembered);
    }
    (out, next)
}

fn channel_lines(
    out: &mut Vec<String>,
    prefix: &str,
    topic_base: &str,
    c: &ChannelStats,
    was: PreviousChannel,
) {
    let base = format!("{topic_base}.channel.{}", c.channel_name);
    line(
        out,
        prefix,
        format_args!("{base}.message_count"),
        increase(c.message_count, was.message_count) as i128,
        "c",
    );
    line(
        out,
        prefix,
        format_args!("{base}.depth"),
        c.depth as i128,
        "g",
    );
    line(
        out,
        prefix,
        format_args!("{base}.backend_depth"),
        c.backend_depth as i128,
        "g",
    );
    line(
        out,
        prefix,
        format_args!("{base}.in_flight_count"),
        c.in_flight_count as i128,
        "g",
    );
    line(
        out,
        prefix,
        format_args!("{base}.deferred_count"),
        c.deferred_count as i128,
        "g",
    );
    line(
        out,
        prefix,
        format_args!("{base}.requeue_count"),
        increase(c.requeue_count, was.requeue_count) as i128,
        "c",
    );
    line(
        out,
        prefix,
        format_args!("{base}.timeout_count"),
        increase(c.timeout_count, was.timeout_count) as i128,
        "c",
    );
    // Ours, only while max attempts are in force for the channel (as in /stats).
    if let Some(d) = &c.dead_letters {
        line(
            out,
            prefix,
            format_args!("{base}.dead_lettered_count"),
            increase(d.dead_lettered_count, was.dead_lettered_count) as i128,
            "c",
        );
    }
    line(
        out,
        prefix,
        format_args!("{base}.clients"),
        c.client_count as i128,
        "g",
    );
    latency_lines(out, prefix, &base, &c.e2e_processing_latency);
}

/// What the process's allocator holds, for nsqd's `mem.*` names (nsqd reports Go's heap; the
/// closest figures of a program without a garbage collector: the allocator's bytes in use and
/// free, what it gave back, and zero for the GC's own figures).
#[derive(Debug, Default, Clone, Copy)]
pub struct MemFigures {
    pub in_use_bytes: u64,
    pub idle_bytes: u64,
    pub released_bytes: u64,
}

/// nsqd's `mem.*` lines for `m` (gc_runs a counter, always 0 here; the rest gauges).
pub fn mem_lines(prefix: &str, m: &MemFigures) -> Vec<String> {
    let mut out = Vec::new();
    let gauges: [(&str, u64); 8] = [
        ("heap_objects", 0),
        ("heap_idle_bytes", m.idle_bytes),
        ("heap_in_use_bytes", m.in_use_bytes),
        ("heap_released_bytes", m.released_bytes),
        ("gc_pause_usec_100", 0),
        ("gc_pause_usec_99", 0),
        ("gc_pause_usec_95", 0),
        ("next_gc_bytes", 0),
    ];
    for (name, value) in gauges {
        line(
            &mut out,
            prefix,
            format_args!("mem.{name}"),
            value as i128,
            "g",
        );
    }
    line(&mut out, prefix, format_args!("mem.gc_runs"), 0, "c");
    out
}

/// Packs lines into packets of at most `size` bytes (a longer line alone in its packet).
pub fn packets(lines: &[String], size: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut current: Vec<u8> = Vec::with_capacity(size);
    for l in lines {
        if !current.is_empty() && current.len() + l.len() > size {
            out.push(std::mem::replace(&mut current, Vec::with_capacity(size)));
        }
        current.extend_from_slice(l.as_bytes());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::Percentile;

    fn channel(name: &str, count: u64, requeued: u64) -> ChannelStats {
        ChannelStats {
            channel_name: name.to_string(),
            depth: 3,
            backend_depth: 1,
            in_flight_count: 2,
            deferred_count: 0,
            message_count: count,
            requeue_count: requeued,
            timeout_count: 0,
            client_count: 1,
            clients: None,
            paused: false,
            e2e_processing_latency: Latency::default(),
            position: None,
            dead_letters: None,
        }
    }

    fn topic(count: u64, channels: Vec<ChannelStats>) -> TopicStats {
        TopicStats {
            topic_name: "orders".to_string(),
            channels,
            depth: 5,
            backend_depth: 4,
            message_count: count,
            message_bytes: count * 10,
            paused: false,
            e2e_processing_latency: Latency {
                count: 1,
                percentiles: Some(vec![Percentile {
                    quantile: 0.99,
                    value: 1234.0,
                }]),
                ..Latency::default()
            },
            retention: None,
            file_bytes: 0,
            replication: None,
        }
    }

    #[test]
    fn names_types_and_differences_as_nsqd() {
        let t = topic(10, vec![channel("a", 7, 1), channel("b#ephemeral", 10, 0)]);
        let (first, prev) = topic_lines(&[t], &Previous::default(), "nsq.h_4151.", false);
        assert!(first.contains(&"nsq.h_4151.topic.orders.message_count:10|c\n".to_string()));
        assert!(first.contains(&"nsq.h_4151.topic.orders.message_bytes:100|c\n".to_string()));
        assert!(first.contains(&"nsq.h_4151.topic.orders.depth:5|g\n".to_string()));
        assert!(first.contains(&"nsq.h_4151.topic.orders.backend_depth:4|g\n".to_string()));
        assert!(first
            .contains(&"nsq.h_4151.topic.orders.e2e_processing_latency_99:1234|g\n".to_string()));
        assert!(
            first.contains(&"nsq.h_4151.topic.orders.channel.a.in_flight_count:2|g\n".to_string())
        );
        assert!(first.contains(&"nsq.h_4151.topic.orders.channel.a.clients:1|g\n".to_string()));
        assert!(
            first.contains(&"nsq.h_4151.topic.orders.channel.a.requeue_count:1|c\n".to_string())
        );
        assert_eq!(first.len(), 5 + 2 * 8);
        let t = topic(25, vec![channel("a", 9, 1)]);
        let (second, _) = topic_lines(&[t], &prev, "", true);
        assert!(second.contains(&"topic.orders.message_count:15|c\n".to_string()));
        assert!(second.contains(&"topic.orders.channel.a.message_count:2|c\n".to_string()));
        assert!(second.contains(&"topic.orders.channel.a.requeue_count:0|c\n".to_string()));
    }

    #[test]
    fn a_count_that_went_down_is_sent_whole() {
        let (_, prev) = topic_lines(&[topic(100, vec![])], &Previous::default(), "", false);
        let (lines, _) = topic_lines(&[topic(3, vec![])], &prev, "", false);
        assert!(lines.contains(&"topic.orders.message_count:3|c\n".to_string()));
    }

    #[test]
    fn packets_hold_whole_lines_within_the_size() {
        let lines: Vec<String> = (0..100)
            .map(|i| format!("topic.t{i}.depth:{i}|g\n"))
            .collect();
        let packed = packets(&lines, 64);
        assert!(packed.iter().all(|p| p.len() <= 64 && p.ends_with(b"\n")));
        let joined: Vec<u8> = packed.concat();
        assert_eq!(joined, lines.concat().into_bytes());
        let long = vec!["x".repeat(100) + "\n", "y:1|g\n".to_string()];
        let packed = packets(&long, 64);
        assert_eq!(packed.len(), 2);
        assert_eq!(packed[0].len(), 101);
    }

    #[test]
    fn mem_lines_have_nsqds_names() {
        let lines = mem_lines("p.", &MemFigures::default());
        assert_eq!(lines.len(), 9);
        assert!(lines.contains(&"p.mem.heap_in_use_bytes:0|g\n".to_string()));
        assert!(lines.contains(&"p.mem.gc_runs:0|c\n".to_string()));
    }
}
