//! What `/stats` reports, in nsqd's words: the structs serialised to its JSON (fields in nsqd's
//! order, nsqd's names and JSON types), its text layout, the process start time, the
//! process figures reported under nsqd's `memory` keys, and the data path's file system space
//! (for `/metrics`).
//!
//! Each shard fills [`TopicStats`] for the topics it owns and [`ClientStats`] for the
//! producers connected to it ([`crate::admin_ops`]); the HTTP side merges the shards' answers into
//! one [`StatsDoc`]. Everything here is plain data (`Send`), so it can travel in the mailboxes.
//!
//! End-to-end latency samples and their quantiles live in [`crate::latency`] (each channel keeps
//! its own); this module re-exports the figures ([`Latency`], [`latency_of`]) and the
//! start-up setting ([`configure_e2e`]) so the `/stats` side reaches them from one place.
//! A channel's own counts are [`crate::channel::Figures`]; this module only depends on the
//! domain (a consumer's [`ClientInfo`] for [`ClientStats::new`]), never the other way.

use crate::channel::ClientInfo;
use crate::ids::now_nanos;
pub use crate::latency::{configure_e2e, latency_of, Latency};
use protocol::duration::format_duration;
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The whole `/stats?format=json` answer.
#[derive(Debug, Clone, Serialize)]
pub struct StatsDoc {
    pub version: &'static str,
    pub health: String,
    pub start_time: i64,
    /// `null` when a `topic` filter names no topic, as nsqd.
    pub topics: Option<Vec<TopicStats>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemStats>,
    /// `null` with `include_clients=false`, for a `topic` filter that names no topic, and
    /// when nothing published (nsqd's nil slice).
    pub producers: Option<Vec<ClientStats>>,
    /// The session with the replication controller (ours): present only with
    /// `--replication-address`, so that without it the document has nsqd's keys exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterStats>,
}

/// `/stats`' `cluster` object: this broker's identity and its session with the controller.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStats {
    pub broker_id: u64,
    pub incarnation: u64,
    /// `--replication-address`, as registered.
    pub address: String,
    /// The controller node that last answered as leader (0: none yet).
    pub controller_leader: u64,
    /// The metadata version of the broker's view (`null`: no view yet).
    pub view_version: Option<u64>,
    /// The view says this broker is registered and not fenced.
    pub live: bool,
    /// The host rebooted since the broker's last start.
    pub boot_changed: bool,
    /// The controller's state of each replicated topic this broker holds, as its owner shard
    /// last received it.
    pub topics: std::collections::BTreeMap<String, replication::controller::TopicState>,
    /// Per shard, in shard order: every other broker's id and the address of its shard that
    /// this shard dials, as the session last sent them.
    pub peers: Vec<std::collections::BTreeMap<u64, std::net::SocketAddr>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicStats {
    pub topic_name: String,
    pub channels: Vec<ChannelStats>,
    pub depth: i64,
    pub backend_depth: i64,
    pub message_count: u64,
    pub message_bytes: u64,
    pub paused: bool,
    pub e2e_processing_latency: Latency,
    /// What the topic keeps beyond what its channels need (ours; nsqd has no retention):
    /// present only while a retention limit is in force for the topic, so that without one
    /// the object has nsqd's keys exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionStats>,
    /// Bytes of the topic's segment files (for `/metrics`; not in nsqd's JSON).
    #[serde(skip)]
    pub file_bytes: u64,
    /// A replicated topic's replica on this broker (ours): present only for a replicated
    /// topic, so that without replication the object has nsqd's keys exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationStats>,
}

/// A replicated topic's replica in /stats.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplicationStats {
    /// The topic's replica count, and its brokers.
    pub replicas: usize,
    pub brokers: Vec<u64>,
    /// `leader`, `follower`, or `idle` (no leader named, or not a replica now).
    pub role: &'static str,
    /// The leader's broker id (0: none).
    pub leader: u64,
    pub epoch: u64,
    /// The in-sync set, as the controller decided it.
    pub isr: Vec<u64>,
    /// The log's start (what is below was released, or never held: a follower begins at its
    /// leader's start), its end, and (on the leader) the high watermark: channels deliver
    /// below it.
    pub log_start: u64,
    pub log_end: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<u64>,
    /// Publishes waiting for the in-sync replicas.
    pub waiting_publishes: usize,
}

/// A topic's retention in /stats: the limits in force (0: none, as nsqd: what every channel
/// passed goes), and what its files hold.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetentionStats {
    pub time_ns: u64,
    pub bytes: u64,
    /// Whether the limits are the topic's own (`POST /topic/config`) or the flags'.
    pub time_is_topics: bool,
    pub bytes_is_topics: bool,
    /// The first seq of the oldest segment file, and the timestamp (ns) of its first message
    /// (0 when the topic has no file).
    pub oldest_offset: u64,
    pub oldest_timestamp: i64,
    /// Bytes of the topic's segment files.
    pub retained_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChannelStats {
    pub channel_name: String,
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: i64,
    pub deferred_count: i64,
    pub message_count: u64,
    pub requeue_count: u64,
    pub timeout_count: u64,
    pub client_count: i64,
    /// `null` when the request said `include_clients=false`, as nsqd.
    pub clients: Option<Vec<ClientStats>>,
    pub paused: bool,
    pub e2e_processing_latency: Latency,
    /// Where the channel stands in its topic's log (ours): present only while a retention
    /// limit is in force for the topic, or when asked (`include_positions=true`), so that
    /// otherwise the object has nsqd's keys exactly.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub position: Option<PositionStats>,
    /// Max attempts (ours; nsqd has none): `dead_lettered_count`, `max_attempts` and
    /// `dead_letter_topic` on the channel object, present only while a limit is in force for
    /// the channel (or it has dead-lettered since start), so that without one the object has
    /// nsqd's keys exactly.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<DeadLetterStats>,
}

/// A channel's position (`/stats`): `offset`, the next seq it takes from the topic's log (what
/// `POST /channel/rewind?offset=` sets), and `oldest_owed_timestamp`, the time (ns) of the
/// oldest message it still owes (0 when it owes nothing), so lag reads in time.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PositionStats {
    pub offset: u64,
    pub oldest_owed_timestamp: i64,
}

/// A channel's max attempts in /stats.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeadLetterStats {
    /// Messages that reached max attempts since start (published to the dead-letter topic, or
    /// dropped without one).
    pub dead_lettered_count: u64,
    /// The limit in force (0: none).
    pub max_attempts: u16,
    /// Where they go ("" when they are dropped).
    pub dead_letter_topic: String,
}

/// nsqd's client states (`state` in /stats).
pub const STATE_INIT: i32 = 0;
pub const STATE_SUBSCRIBED: i32 = 3;
/// After CLS (nsqd's stateClosing).
pub const STATE_CLOSING: i32 = 4;

#[derive(Debug, Clone, Serialize)]
pub struct ClientStats {
    pub client_id: String,
    pub hostname: String,
    pub version: &'static str,
    pub remote_address: String,
    pub state: i32,
    pub ready_count: i64,
    pub in_flight_count: i64,
    pub message_count: u64,
    pub finish_count: u64,
    pub requeue_count: u64,
    pub connect_ts: i64,
    pub sample_rate: i32,
    pub deflate: bool,
    pub snappy: bool,
    pub user_agent: String,
    /// AUTH state, left out when not set (nsqd's `omitempty`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub authed: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub auth_identity: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub auth_identity_url: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pub_counts: Vec<PubCount>,
    pub tls: bool,
    pub tls_cipher_suite: String,
    pub tls_version: String,
    pub tls_negotiated_protocol: String,
    pub tls_negotiated_protocol_is_mutual: bool,
}

impl ClientStats {
    /// A V2 client as /stats shows it before the counters are filled in.
    pub fn new(info: &ClientInfo, state: i32) -> ClientStats {
        let tls = info.tls.as_ref();
        ClientStats {
            client_id: info.client_id.clone(),
            hostname: info.hostname.clone(),
            version: "V2",
            remote_address: info.remote_address.clone(),
            state,
            ready_count: 0,
            in_flight_count: 0,
            message_count: 0,
            finish_count: 0,
            requeue_count: 0,
            connect_ts: info.connect_ts,
            sample_rate: i32::from(info.sample_rate),
            deflate: info.deflate,
            snappy: info.snappy,
            user_agent: info.user_agent.clone(),
            authed: info.auth.as_ref().is_some_and(|a| a.authed),
            auth_identity: info
                .auth
                .as_ref()
                .map_or_else(String::new, |a| a.identity.clone()),
            auth_identity_url: info
                .auth
                .as_ref()
                .map_or_else(String::new, |a| a.identity_url.clone()),
            pub_counts: Vec::new(),
            tls: info.tls.is_some(),
            tls_cipher_suite: tls.map(|t| t.cipher_suite.clone()).unwrap_or_default(),
            tls_version: tls.map(|t| t.version.clone()).unwrap_or_default(),
            tls_negotiated_protocol: tls
                .map(|t| t.negotiated_protocol.clone())
                .unwrap_or_default(),
            // Go has reported true whenever TLS is on since it deprecated the field.
            tls_negotiated_protocol_is_mutual: tls.is_some(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PubCount {
    pub topic: String,
    pub count: u64,
}

/// nsqd's `memory` object. nsqd reports Go runtime figures; we have no garbage collector, so the
/// keys stay (tools read them) and carry this process's own numbers: `heap_in_use_bytes` is the
/// resident set, `heap_idle_bytes` the mapped but not resident part, `heap_objects` the
/// messages held in memory; the GC figures are 0.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MemStats {
    pub heap_objects: u64,
    pub heap_idle_bytes: u64,
    pub heap_in_use_bytes: u64,
    pub heap_released_bytes: u64,
    pub gc_pause_usec_100: u64,
    pub gc_pause_usec_99: u64,
    pub gc_pause_usec_95: u64,
    pub next_gc_bytes: u64,
    pub gc_total_runs: u64,
}

impl MemStats {
    /// Reads `/proc/self/statm`; zeros where it cannot.
    pub fn of_process(messages_held: u64) -> MemStats {
        let page = page_size();
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let mut fields = statm
            .split_whitespace()
            .map(|f| f.parse::<u64>().unwrap_or(0));
        let size = fields.next().unwrap_or(0);
        let resident = fields.next().unwrap_or(0);
        MemStats {
            heap_objects: messages_held,
            heap_idle_bytes: size.saturating_sub(resident) * page,
            heap_in_use_bytes: resident * page,
            ..MemStats::default()
        }
    }
}

/// The file system holding the data path, for `/metrics`: its size and the bytes an
/// unprivileged writer (the broker's user) may still use, as `statvfs` gives them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskSpace {
    pub size_bytes: u64,
    pub available_bytes: u64,
}

impl DiskSpace {
    /// `None` when the path cannot be asked (gone, or not a C string).
    pub fn of(path: &std::path::Path) -> Option<DiskSpace> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: `c` is a NUL-terminated path and `st` a buffer of the struct's size.
        if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: statvfs filled it (it returned 0).
        let st = unsafe { st.assume_init() };
        Some(DiskSpace {
            size_bytes: st.f_blocks.saturating_mul(st.f_frsize),
            available_bytes: st.f_bavail.saturating_mul(st.f_frsize),
        })
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// When the process started (first asked), for `start_time` and `uptime`.
pub fn start_time() -> (SystemTime, std::time::Instant) {
    static START: OnceLock<(SystemTime, std::time::Instant)> = OnceLock::new();
    *START.get_or_init(|| (SystemTime::now(), std::time::Instant::now()))
}

/// `start_time` as Unix seconds.
pub fn start_unix() -> i64 {
    start_time()
        .0
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The text `/stats` answer, laid out as nsqd 1.3 prints it.
pub fn render_text(doc: &StatsDoc, uptime: Duration) -> String {
    let mut w = String::with_capacity(1024);
    let _ = writeln!(
        w,
        "nsqd v{} (built w/{} {})",
        doc.version,
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(w, "start_time {}", rfc3339(doc.start_time));
    let _ = writeln!(w, "uptime {}", format_duration(uptime));
    let _ = writeln!(w, "\nHealth: {}", doc.health);
    if let Some(m) = &doc.memory {
        w.push_str("\nMemory:\n");
        for (k, v) in [
            ("heap_objects", m.heap_objects),
            ("heap_idle_bytes", m.heap_idle_bytes),
            ("heap_in_use_bytes", m.heap_in_use_bytes),
            ("heap_released_bytes", m.heap_released_bytes),
            ("gc_pause_usec_100", m.gc_pause_usec_100),
            ("gc_pause_usec_99", m.gc_pause_usec_99),
            ("gc_pause_usec_95", m.gc_pause_usec_95),
            ("next_gc_bytes", m.next_gc_bytes),
            ("gc_total_runs", m.gc_total_runs),
        ] {
            let _ = writeln!(w, "   {k:<25}\t{v}");
        }
    }
    let topics = doc.topics.as_deref().unwrap_or_default();
    if topics.is_empty() {
        w.push_str("\nTopics: None\n");
    } else {
        w.push_str("\nTopics:");
    }
    for t in topics {
        let _ = writeln!(
            w,
            "\n{}[{:<15}] depth: {:<5} be-depth: {:<5} msgs: {:<8} e2e%: {}",
            if t.paused { "*P " } else { "   " },
            t.topic_name,
            t.depth,
            t.backend_depth,
            t.message_count,
            latency_text(&t.e2e_processing_latency)
        );
        for c in &t.channels {
            let _ = writeln!(
                w,
                "{}[{:<25}] depth: {:<5} be-depth: {:<5} inflt: {:<4} def: {:<4} re-q: {:<5} timeout: {:<5} msgs: {:<8} e2e%: {}",
                if c.paused { "   *P " } else { "      " },
                c.channel_name,
                c.depth,
                c.backend_depth,
                c.in_flight_count,
                c.deferred_count,
                c.requeue_count,
                c.timeout_count,
                c.message_count,
                latency_text(&c.e2e_processing_latency)
            );
            for client in c.clients.iter().flatten() {
                let _ = writeln!(w, "        {}", client_text(client));
            }
        }
    }
    let producers = doc.producers.as_deref().unwrap_or_default();
    if producers.is_empty() {
        w.push_str("\nProducers: None\n");
    } else {
        w.push_str("\nProducers:\n");
        for p in producers {
            let _ = writeln!(w, "   {}", client_text(p));
        }
    }
    w
}

/// One client line of the text stats.
fn client_text(c: &ClientStats) -> String {
    let connected = (now_nanos() / 1_000_000_000)
        .saturating_sub(c.connect_ts)
        .max(0) as u64;
    let connected = format_duration(Duration::from_secs(connected));
    let port = c.remote_address.rsplit(':').next().unwrap_or_default();
    let id = format!("{}:{} {}", c.hostname, port, c.user_agent);
    if !c.pub_counts.is_empty() {
        let total: u64 = c.pub_counts.iter().map(|p| p.count).sum();
        let topics: Vec<String> = c
            .pub_counts
            .iter()
            .map(|p| format!("{}={}", p.topic, p.count))
            .collect();
        return format!(
            "[{} {:<21}] msgs: {:<8} topics: {} connected: {}",
            c.version,
            id,
            total,
            topics.join(","),
            connected
        );
    }
    format!(
        "[{} {:<21}] state: {} inflt: {:<4} rdy: {:<4} fin: {:<8} re-q: {:<8} msgs: {:<8} connected: {}",
        c.version,
        id,
        c.state,
        c.in_flight_count,
        c.ready_count,
        c.finish_count,
        c.requeue_count,
        c.message_count,
        connected
    )
}

/// nsqd's e2e text: each percentile's value, human-readable, comma separated.
fn latency_text(l: &Latency) -> String {
    l.percentiles
        .iter()
        .flatten()
        .map(|p| nanos_to_human(p.value))
        .collect::<Vec<_>>()
        .join(", ")
}

fn nanos_to_human(v: f64) -> String {
    let (v, unit) = if v > 1e9 {
        (v / 1e9, "s")
    } else if v > 1e6 {
        (v / 1e6, "ms")
    } else if v > 1e3 {
        (v / 1e3, "us")
    } else {
        (v, "ns")
    };
    format!("{v:.1}{unit}")
}

/// Unix seconds as RFC 3339 in UTC (`2026-11-22T04:34:50Z`).
pub fn rfc3339(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_322_090), "2026-11-22T04:34:50Z");
    }

    #[test]
    fn disk_space_of_a_path() {
        let root = DiskSpace::of(std::path::Path::new("/")).unwrap_or_default();
        assert!(root.size_bytes > 0, "{root:?}");
        assert!(root.available_bytes <= root.size_bytes, "{root:?}");
        assert_eq!(DiskSpace::of(std::path::Path::new("/no/such/dir")), None);
        assert_eq!(DiskSpace::of(std::path::Path::new("a\0b")), None);
    }

    #[test]
    fn text_layout_without_topics() {
        let doc = StatsDoc {
            version: protocol::NSQD_COMPAT_VERSION,
            health: "OK".into(),
            start_time: 0,
            topics: None,
            memory: None,
            producers: None,
            cluster: None,
        };
        let t = render_text(&doc, Duration::from_secs(1));
        assert!(
            t.contains("\nHealth: OK\n\nTopics: None\n\nProducers: None\n"),
            "{t}"
        );
    }
}
