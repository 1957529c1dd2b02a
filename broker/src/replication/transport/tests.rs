//! The transport over real sockets: glommio executors on their own threads, brokers' `Peers`
//! and hand-made peers on 127.0.0.1 ephemeral ports, every wait bounded in time.

use super::config::TransportConfig;
use super::peers::{PeerStats, Peers, SendError};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use nsq_common::timeout::with_timeout;
use replication::ids::{BrokerId, Epoch};
use replication::replica::{Batch, Msg, Record};
use replication::wire::{
    encode, ChannelOp, Delivery, Forward, Frame, Hello, Inbound, SendError as LinkSendError,
    TopicMsg,
};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

const CLUSTER: &str = "test-cluster";

/// Runs `body` on a glommio executor of its own thread, bounded by `limit`.
fn on_executor<F, Fut>(limit: Duration, body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let spawned = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .name("repl-transport-test")
        .spawn(move || async move {
            let done = with_timeout(limit, body()).await;
            assert!(done.is_some(), "the test did not finish within {limit:?}");
        });
    let handle = spawned.unwrap_or_else(|e| panic!("a glommio executor: {e}"));
    if let Err(e) = handle.join() {
        panic!("the test's executor failed: {e:?}");
    }
}

type Inbox = Rc<RefCell<Vec<(BrokerId, Inbound)>>>;

struct Node {
    peers: Peers,
    inbox: Inbox,
    addr: SocketAddr,
}

fn config(id: u64, incarnation: u64, cluster: &str) -> TransportConfig {
    let mut cfg = TransportConfig::new(cluster, BrokerId(id), incarnation);
    cfg.heartbeat_every = Duration::from_millis(20);
    cfg.idle_timeout = Duration::from_secs(2);
    cfg.handshake_timeout = Duration::from_secs(1);
    cfg.backoff_min = Duration::from_millis(10);
    cfg.backoff_max = Duration::from_millis(100);
    cfg.seed = id;
    cfg
}

fn node_with(cfg: TransportConfig, listen: SocketAddr) -> Node {
    let inbox: Inbox = Rc::default();
    let sink = inbox.clone();
    let peers = Peers::new(cfg, move |from, d| sink.borrow_mut().push((from, d)))
        .unwrap_or_else(|e| panic!("config: {e}"));
    let addr = peers
        .listen(listen)
        .unwrap_or_else(|e| panic!("listen on {listen}: {e}"));
    Node { peers, inbox, addr }
}

/// A broker started again on `addr`: the port is taken again once the old listener's
/// accept loop has ended (the executor runs it on its next turns).
async fn restarted(cfg: TransportConfig, addr: SocketAddr) -> Node {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tries = 0;
    loop {
        let inbox: Inbox = Rc::default();
        let sink = inbox.clone();
        let peers = Peers::new(cfg.clone(), move |from, d| {
            sink.borrow_mut().push((from, d))
        })
        .unwrap_or_else(|e| panic!("config: {e}"));
        tries += 1;
        match peers.listen(addr) {
            Ok(addr) => {
                tracing::debug!(tries, "restarted");
                return Node { peers, inbox, addr };
            }
            Err(e) => assert!(Instant::now() < deadline, "listen on {addr}: {e}"),
        }
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

fn node(id: u64) -> Node {
    node_with(config(id, 1, CLUSTER), any_port())
}

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn peer_set(peers: &[(u64, SocketAddr)]) -> BTreeMap<BrokerId, SocketAddr> {
    peers.iter().map(|&(id, a)| (BrokerId(id), a)).collect()
}

/// Waits until `cond` holds, polling every few milliseconds; fails the test after `limit`.
async fn until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

fn connected(n: &Node, peer: u64) -> Option<u64> {
    n.peers.stats(BrokerId(peer)).and_then(|s| s.connected)
}

fn stats(n: &Node, peer: u64) -> PeerStats {
    n.peers
        .stats(BrokerId(peer))
        .unwrap_or_else(|| panic!("broker {peer} is not a peer"))
}

fn append(epoch: u64, base: u64, bodies: &[&[u8]]) -> Msg {
    Msg::Append {
        epoch: Epoch(epoch),
        hw: base,
        base,
        batch: Batch {
            epoch: Epoch(epoch),
            records: bodies
                .iter()
                .enumerate()
                .map(|(i, b)| Record::new(base + i as u64, b.to_vec()))
                .collect(),
        },
    }
}

fn heartbeat(epoch: u64, end: u64) -> Msg {
    append(epoch, end, &[])
}

fn ack(epoch: u64, end: u64) -> Msg {
    Msg::Ack {
        epoch: Epoch(epoch),
        incarnation: 1,
        end,
        durable_end: end,
        clean: true,
        resend: false,
    }
}

/// The replica message among what arrived, if `inbound` is one.
fn replica(inbound: &Inbound) -> Option<&Delivery> {
    match inbound {
        Inbound::Replica(d) => Some(d),
        Inbound::Forward(_) => None,
    }
}

/// The replica messages that arrived off the wire (not replays), in order.
fn wire_deliveries(inbox: &Inbox) -> Vec<(BrokerId, String, Msg)> {
    inbox
        .borrow()
        .iter()
        .filter_map(|(from, i)| replica(i).map(|d| (from, d)))
        .filter(|(_, d)| !d.replayed)
        .map(|(from, d)| (*from, d.topic.clone(), d.msg.clone()))
        .collect()
}

fn hello_bytes(cluster: &str, broker: u64, incarnation: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let hello = Hello {
        cluster_id: cluster.to_owned(),
        broker: BrokerId(broker),
        incarnation,
    };
    let r = encode(&Frame::Hello(hello), 1 << 20, &mut out);
    assert!(r.is_ok(), "a handshake encodes");
    out
}

/// A hand-made peer: connects and writes `bytes`.
async fn raw_peer(to: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(to)
        .await
        .unwrap_or_else(|e| panic!("connect {to}: {e}"));
    s.write_all(bytes)
        .await
        .unwrap_or_else(|e| panic!("write to {to}: {e}"));
    s
}

/// Whether the broker closes `s` within `limit` (whatever it sent first is read and dropped).
async fn closed_by_the_broker(s: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match with_timeout(left, s.read(&mut buf)).await {
            None => return false,
            Some(Ok(0)) | Some(Err(_)) => return true,
            Some(Ok(_)) => {}
        }
    }
}

async fn connect_pair(a: &Node, a_id: u64, b: &Node, b_id: u64) {
    a.peers.set_peers(peer_set(&[(b_id, b.addr)]));
    b.peers.set_peers(peer_set(&[(a_id, a.addr)]));
    until("the pair is connected", Duration::from_secs(5), || {
        connected(a, b_id).is_some() && connected(b, a_id).is_some()
    })
    .await;
}

#[test]
fn two_peers_exchange_messages_of_several_topics_both_ways() {
    on_executor(Duration::from_secs(20), || async {
        let a = node(1);
        let b = node(2);
        connect_pair(&a, 1, &b, 2).await;
        let topics = ["orders", "clicks", "audit.log", "t-3", "t_4"];
        let mut to_b = Vec::new();
        let mut to_a = Vec::new();
        for round in 0..3u64 {
            for (i, t) in topics.iter().enumerate() {
                let body = format!("{t} round {round}");
                let m = append(1, round, &[body.as_bytes(), b"second"]);
                assert_eq!(a.peers.send(BrokerId(2), t, m.clone()), Ok(()));
                to_b.push((BrokerId(1), t.to_string(), m));
                let reply = Msg::EpochEndQuery {
                    epoch: Epoch(round + 1),
                    last_epoch: Epoch(i as u64),
                };
                assert_eq!(b.peers.send(BrokerId(1), t, reply.clone()), Ok(()));
                to_a.push((BrokerId(2), t.to_string(), reply));
            }
        }
        let n = to_b.len();
        until("every message arrives", Duration::from_secs(5), || {
            wire_deliveries(&b.inbox).len() >= n && wire_deliveries(&a.inbox).len() >= n
        })
        .await;
        assert_eq!(wire_deliveries(&b.inbox), to_b, "a to b, in order");
        assert_eq!(wire_deliveries(&a.inbox), to_a, "b to a, in order");
        // One connection for the pair: each side established exactly one.
        assert_eq!(stats(&a, 2).established, 1);
        assert_eq!(stats(&b, 1).established, 1);
        assert_eq!(
            a.peers.send(BrokerId(3), "orders", heartbeat(1, 0)),
            Err(SendError::UnknownPeer(3))
        );
    });
}

#[test]
fn idle_topics_cost_one_small_tick_per_interval_on_the_socket() {
    const TOPICS: usize = 100;
    on_executor(Duration::from_secs(30), || async {
        let leader = node(1);
        let follower = node(2);
        connect_pair(&leader, 1, &follower, 2).await;
        let topics: Vec<String> = (0..TOPICS).map(|i| format!("idle-{i}")).collect();
        let every = Duration::from_millis(20);
        // The replicas' part, as the data path plays it: the leader heartbeats every topic each
        // interval (the same heartbeat while idle); the follower answers each heartbeat it is
        // handed, sent or replayed, with the same ack.
        let mut next = Instant::now();
        let mut acked = vec![0u64; TOPICS];
        let mut heard = vec![0u64; TOPICS];
        let mut run =
            |leader: &Node, follower: &Node, acked: &mut Vec<u64>, heard: &mut Vec<u64>| {
                if Instant::now() >= next {
                    next += every;
                    for t in &topics {
                        let r = leader.peers.send(BrokerId(2), t, heartbeat(1, 10));
                        assert_eq!(r, Ok(()));
                    }
                }
                for (from, d) in follower.inbox.borrow_mut().drain(..) {
                    let Inbound::Replica(d) = d else {
                        panic!("a forward among the heartbeats: {d:?}");
                    };
                    assert_eq!((from, &d.msg), (BrokerId(1), &heartbeat(1, 10)));
                    let i = topics.iter().position(|t| *t == d.topic);
                    let i = i.unwrap_or_else(|| panic!("unknown topic {}", d.topic));
                    heard[i] += 1;
                    assert_eq!(
                        follower.peers.send(BrokerId(1), &d.topic, ack(1, 10)),
                        Ok(())
                    );
                }
                for (_, d) in leader.inbox.borrow_mut().drain(..) {
                    let Inbound::Replica(d) = d else {
                        panic!("a forward among the acks: {d:?}");
                    };
                    assert_eq!(d.msg, ack(1, 10));
                    if let Some(i) = topics.iter().position(|t| *t == d.topic) {
                        acked[i] += 1;
                    }
                }
            };
        let warm_up = Instant::now() + Duration::from_millis(500);
        while Instant::now() < warm_up {
            run(&leader, &follower, &mut acked, &mut heard);
            glommio::timer::sleep(Duration::from_millis(2)).await;
        }
        let out_before = stats(&leader, 2).bytes_out;
        let back_before = stats(&follower, 1).bytes_out;
        acked.iter_mut().for_each(|n| *n = 0);
        heard.iter_mut().for_each(|n| *n = 0);
        let window = Duration::from_secs(1);
        let end = Instant::now() + window;
        while Instant::now() < end {
            run(&leader, &follower, &mut acked, &mut heard);
            glommio::timer::sleep(Duration::from_millis(2)).await;
        }
        let out = stats(&leader, 2).bytes_out - out_before;
        let back = stats(&follower, 1).bytes_out - back_before;
        let intervals = (window.as_millis() / every.as_millis()) as u64;
        // Sent per topic, a heartbeat or an ack is about 50 bytes per topic and interval.
        let uncompressed = encoded(&topics[0], &heartbeat(1, 10)) * TOPICS as u64 * intervals;
        tracing::info!(
            out,
            back,
            uncompressed,
            "bytes in one second of idle topics"
        );
        // A tick frame is 22 bytes; twice as many for timer jitter on a shared machine.
        for (dir, bytes) in [("leader to follower", out), ("follower to leader", back)] {
            assert!(
                bytes <= 2 * 22 * intervals,
                "{dir}: {bytes} bytes for {intervals} intervals (per topic: {uncompressed})"
            );
        }
        // And yet every topic's heartbeat and ack were handed over, again and again.
        let least_heard = heard.iter().copied().min().unwrap_or(0);
        let least_acked = acked.iter().copied().min().unwrap_or(0);
        assert!(
            least_heard >= intervals / 2,
            "heartbeats replayed: {least_heard}"
        );
        assert!(least_acked >= intervals / 2, "acks replayed: {least_acked}");
    });
}

fn encoded(topic: &str, msg: &Msg) -> u64 {
    replication::wire::codec::encoded_len(topic, msg) as u64
}

#[test]
fn a_restarted_peer_reconnects_with_its_new_incarnation_and_exchanges_again() {
    on_executor(Duration::from_secs(30), || async {
        let a = node(1);
        let b = node(2);
        connect_pair(&a, 1, &b, 2).await;
        assert_eq!(connected(&a, 2), Some(1));
        let b_addr = b.addr;
        // The accepting broker restarts on the same address, one incarnation later.
        drop(b);
        until("a notices b is gone", Duration::from_secs(5), || {
            connected(&a, 2).is_none()
        })
        .await;
        let b = restarted(config(2, 2, CLUSTER), b_addr).await;
        b.peers.set_peers(peer_set(&[(1, a.addr)]));
        until(
            "a reconnects to b's new incarnation",
            Duration::from_secs(5),
            || connected(&a, 2) == Some(2) && connected(&b, 1) == Some(1),
        )
        .await;
        exchange(&a, 1, &b, 2, "after-b-restart").await;
        // The dialing broker restarts too.
        let a_addr = a.addr;
        drop(a);
        let a = restarted(config(1, 2, CLUSTER), a_addr).await;
        a.peers.set_peers(peer_set(&[(2, b.addr)]));
        until(
            "b takes a's new incarnation",
            Duration::from_secs(5),
            || connected(&b, 1) == Some(2) && connected(&a, 2) == Some(2),
        )
        .await;
        exchange(&a, 1, &b, 2, "after-a-restart").await;
        assert_eq!(stats(&b, 1).established, 2, "b's two connections from a");
    });
}

/// One message each way on `topic`, and both arrive.
async fn exchange(a: &Node, a_id: u64, b: &Node, b_id: u64, topic: &str) {
    let m = append(2, 0, &[topic.as_bytes()]);
    assert_eq!(a.peers.send(BrokerId(b_id), topic, m.clone()), Ok(()));
    assert_eq!(b.peers.send(BrokerId(a_id), topic, ack(2, 1)), Ok(()));
    let (want_b, want_a) = (
        (BrokerId(a_id), topic.to_owned(), m),
        (BrokerId(b_id), topic.to_owned(), ack(2, 1)),
    );
    until(
        "the exchange arrives both ways",
        Duration::from_secs(5),
        || {
            wire_deliveries(&b.inbox).contains(&want_b)
                && wire_deliveries(&a.inbox).contains(&want_a)
        },
    )
    .await;
}

#[test]
fn a_newer_incarnation_replaces_the_peers_connection_and_an_older_one_is_refused() {
    on_executor(Duration::from_secs(20), || async {
        // Idle connections stay: only the replacement closes one here.
        let mut cfg = config(5, 1, CLUSTER);
        cfg.idle_timeout = Duration::from_secs(20);
        let b = node_with(cfg, any_port());
        // Broker 2 dials broker 5; its address is never used by 5.
        b.peers.set_peers(peer_set(&[(2, any_port())]));
        let mut first = raw_peer(b.addr, &hello_bytes(CLUSTER, 2, 3)).await;
        until(
            "the first connection is taken",
            Duration::from_secs(5),
            || connected(&b, 2) == Some(3),
        )
        .await;
        let mut second = raw_peer(b.addr, &hello_bytes(CLUSTER, 2, 4)).await;
        until(
            "the newer incarnation replaces it",
            Duration::from_secs(5),
            || connected(&b, 2) == Some(4),
        )
        .await;
        assert!(
            closed_by_the_broker(&mut first, Duration::from_secs(3)).await,
            "the replaced connection is closed"
        );
        let mut stale = raw_peer(b.addr, &hello_bytes(CLUSTER, 2, 3)).await;
        assert!(
            closed_by_the_broker(&mut stale, Duration::from_secs(3)).await,
            "an older incarnation is refused"
        );
        assert_eq!(connected(&b, 2), Some(4));
        // The connection held carries the peer's messages.
        let mut frame = Vec::new();
        let msg = TopicMsg {
            topic: "t".to_owned(),
            msg: ack(1, 7),
        };
        assert!(encode(&Frame::Messages(vec![msg]), 1 << 20, &mut frame).is_ok());
        assert!(second.write_all(&frame).await.is_ok());
        until("the message arrives", Duration::from_secs(5), || {
            wire_deliveries(&b.inbox) == vec![(BrokerId(2), "t".to_owned(), ack(1, 7))]
        })
        .await;
    });
}

#[test]
fn a_peer_of_another_cluster_or_another_broker_than_expected_is_refused() {
    on_executor(Duration::from_secs(20), || async {
        let b = node(5);
        b.peers
            .set_peers(peer_set(&[(1, any_port()), (2, any_port())]));
        // Broker 1 of another cluster dials b.
        let other = node_with(config(1, 1, "another-cluster"), any_port());
        other.peers.set_peers(peer_set(&[(5, b.addr)]));
        // Broker 2 expects broker 3 at b's address.
        let wrong = node(2);
        wrong.peers.set_peers(peer_set(&[(3, b.addr)]));
        // Broker 4 is not in b's peer set.
        let unknown = node(4);
        unknown.peers.set_peers(peer_set(&[(5, b.addr)]));
        until(
            "each is refused at least twice",
            Duration::from_secs(5),
            || stats(&b, 1).refused >= 2 && stats(&wrong, 3).refused >= 2,
        )
        .await;
        glommio::timer::sleep(Duration::from_millis(300)).await;
        assert_eq!(connected(&other, 5), None, "another cluster");
        assert_eq!(stats(&other, 5).established, 0);
        assert_eq!(stats(&b, 1).established, 0);
        assert_eq!(connected(&wrong, 3), None, "another broker than expected");
        assert_eq!(stats(&wrong, 3).established, 0);
        assert_eq!(connected(&unknown, 5), None, "a broker not in the set");
        assert_eq!(stats(&unknown, 5).established, 0);
        assert_eq!(
            other.peers.send(BrokerId(5), "t", heartbeat(1, 0)),
            Err(SendError::NotConnected(5))
        );
        assert!(b.inbox.borrow().is_empty() && wrong.inbox.borrow().is_empty());
    });
}

#[test]
fn garbage_and_an_oversized_length_close_only_that_connection() {
    on_executor(Duration::from_secs(20), || async {
        let a = node(1);
        let b = node(5);
        a.peers.set_peers(peer_set(&[(5, b.addr)]));
        b.peers.set_peers(peer_set(&[(1, a.addr), (2, any_port())]));
        until("a and b are connected", Duration::from_secs(5), || {
            connected(&a, 5).is_some() && connected(&b, 1).is_some()
        })
        .await;
        exchange(&a, 1, &b, 5, "before").await;
        let garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        let mut bad_version = hello_bytes(CLUSTER, 2, 1);
        bad_version.extend_from_slice(&[0, 0, 0, 4, 9, 2, 0, 0]);
        let mut oversized = hello_bytes(CLUSTER, 2, 1);
        oversized.extend_from_slice(&0xffff_fff0u32.to_be_bytes());
        for (what, bytes) in [
            ("garbage instead of a handshake", garbage),
            ("a frame of an unknown version", bad_version),
            ("an oversized length", oversized),
        ] {
            let mut s = raw_peer(b.addr, &bytes).await;
            assert!(
                closed_by_the_broker(&mut s, Duration::from_secs(3)).await,
                "{what}: the connection is closed"
            );
        }
        assert_eq!(stats(&b, 2).refused, 2, "the two after a handshake");
        // The good connection was not touched.
        assert_eq!(stats(&a, 5).established, 1);
        assert_eq!(stats(&b, 1).established, 1);
        exchange(&a, 1, &b, 5, "after").await;
    });
}

#[test]
fn a_full_queue_refuses_a_send_without_growing() {
    on_executor(Duration::from_secs(30), || async {
        let mut cfg = config(5, 1, CLUSTER);
        cfg.link.queue_limit = 256 * 1024;
        cfg.idle_timeout = Duration::from_secs(20);
        let b = node_with(cfg, any_port());
        b.peers.set_peers(peer_set(&[(2, any_port())]));
        // A peer that shakes hands and then reads nothing.
        let _stuck = raw_peer(b.addr, &hello_bytes(CLUSTER, 2, 1)).await;
        until("connected", Duration::from_secs(5), || {
            connected(&b, 2).is_some()
        })
        .await;
        let body = vec![7u8; 60 * 1024];
        let mut refused = None;
        for i in 0..4000u64 {
            match b.peers.send(BrokerId(2), "t", append(1, i, &[&body])) {
                Ok(()) => {}
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
            // Lets the writer fill the socket's buffers.
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(
            refused,
            Some(SendError::Link(LinkSendError::Full)),
            "the queue filled up"
        );
        let queued = stats(&b, 2).queued;
        assert!(queued <= 256 * 1024, "queued {queued}");
        for i in 0..100u64 {
            let r = b.peers.send(BrokerId(2), "t", append(1, i, &[&body]));
            assert_eq!(r, Err(SendError::Link(LinkSendError::Full)));
        }
        assert_eq!(stats(&b, 2).queued, queued, "refused sends queue nothing");
        assert!(
            connected(&b, 2).is_some(),
            "a full queue keeps the connection"
        );
    });
}

/// What arrived off the wire, replays left out, in order.
fn received(inbox: &Inbox) -> Vec<(BrokerId, Inbound)> {
    inbox
        .borrow()
        .iter()
        .filter(|(_, i)| !replica(i).is_some_and(|d| d.replayed))
        .cloned()
        .collect()
}

/// A follower forwards a publish to the topic's leader and the leader answers it; the leader
/// sends its channel operations; each side's forwards arrive interleaved with its replica
/// messages exactly in the order they were sent, on the one connection of the pair.
#[test]
fn forwarded_publishes_answers_and_channel_ops_arrive_in_order_with_replica_messages() {
    on_executor(Duration::from_secs(20), || async {
        let leader = node(1);
        let follower = node(2);
        connect_pair(&leader, 1, &follower, 2).await;
        let publish = |id: u64, bodies: &[&'static [u8]]| Forward::Publish {
            id,
            topic: "orders".into(),
            defer_ms: id * 10,
            bodies: bodies
                .iter()
                .map(|b| bytes::Bytes::from_static(b))
                .collect(),
            origins: Vec::new(),
        };
        let channel = |op: ChannelOp| Forward::Channel {
            topic: "orders".into(),
            channel: "billing".into(),
            op,
        };
        let rounds = 20u64;
        // Follower to leader: its ack of each append, then a forwarded publish.
        let mut to_leader = Vec::new();
        for i in 0..rounds {
            let m = Msg::Ack {
                epoch: Epoch(1),
                incarnation: 1,
                end: i,
                durable_end: i,
                clean: true,
                resend: i % 2 == 0,
            };
            assert_eq!(
                follower.peers.send(BrokerId(1), "orders", m.clone()),
                Ok(())
            );
            to_leader.push(Inbound::Replica(Delivery {
                topic: "orders".into(),
                msg: m,
                replayed: false,
            }));
            let f = publish(i, &[b"one", b"two"]);
            assert_eq!(follower.peers.send_forward(BrokerId(1), f.clone()), Ok(()));
            to_leader.push(Inbound::Forward(f));
        }
        until(
            "the follower's sends arrive",
            Duration::from_secs(5),
            || received(&leader.inbox).len() >= to_leader.len(),
        )
        .await;
        let got: Vec<Inbound> = received(&leader.inbox)
            .into_iter()
            .map(|(from, i)| {
                assert_eq!(from, BrokerId(2));
                i
            })
            .collect();
        assert_eq!(got, to_leader, "follower to leader, in order");
        // Leader to follower: each forwarded publish's answer, then the append holding it, and
        // the channel's operations between them.
        let ops = [
            ChannelOp::Created,
            ChannelOp::Paused(true),
            ChannelOp::Position {
                cursor: 10,
                owed: vec![5, 8, 9],
            },
            ChannelOp::Rewound { to: 1 },
            ChannelOp::Paused(false),
            ChannelOp::Deleted,
        ];
        let mut to_follower = Vec::new();
        for i in 0..rounds {
            let m = append(1, i, &[b"one", b"two"]);
            assert_eq!(leader.peers.send(BrokerId(2), "orders", m.clone()), Ok(()));
            to_follower.push(Inbound::Replica(Delivery {
                topic: "orders".into(),
                msg: m,
                replayed: false,
            }));
            let result = if i % 3 == 0 {
                Err(format!("E_PUB_FAILED replication timed out for {i}"))
            } else {
                Ok(())
            };
            let answer = Forward::Answer { id: i, result };
            assert_eq!(
                leader.peers.send_forward(BrokerId(2), answer.clone()),
                Ok(())
            );
            to_follower.push(Inbound::Forward(answer));
            let op = channel(ops[i as usize % ops.len()].clone());
            assert_eq!(leader.peers.send_forward(BrokerId(2), op.clone()), Ok(()));
            to_follower.push(Inbound::Forward(op));
        }
        until("the leader's sends arrive", Duration::from_secs(5), || {
            received(&follower.inbox).len() >= to_follower.len()
        })
        .await;
        let got: Vec<Inbound> = received(&follower.inbox)
            .into_iter()
            .map(|(from, i)| {
                assert_eq!(from, BrokerId(1));
                i
            })
            .collect();
        assert_eq!(got, to_follower, "leader to follower, in order");
        assert_eq!(
            stats(&leader, 2).established,
            1,
            "one connection for the pair"
        );
        // Without a connection or a peer, a forward fails at once: the caller answers its
        // client instead of waiting.
        assert_eq!(
            leader.peers.send_forward(BrokerId(3), publish(99, &[b"x"])),
            Err(SendError::UnknownPeer(3))
        );
        let invalid = Forward::Channel {
            topic: "orders".into(),
            channel: "c#ephemeral".into(),
            op: ChannelOp::Created,
        };
        assert!(matches!(
            leader.peers.send_forward(BrokerId(2), invalid),
            Err(SendError::Link(LinkSendError::Forward(_)))
        ));
        drop(follower);
        until("the leader notices", Duration::from_secs(5), || {
            connected(&leader, 2).is_none()
        })
        .await;
        assert_eq!(
            leader
                .peers
                .send_forward(BrokerId(2), publish(100, &[b"x"])),
            Err(SendError::NotConnected(2))
        );
    });
}

/// A forward over the queue's byte bound is refused at once, like a replica message, so the
/// follower answers its client E_PUB_FAILED instead of hanging; nothing refused is queued.
#[test]
fn a_full_queue_refuses_a_forward_without_growing() {
    on_executor(Duration::from_secs(30), || async {
        let mut cfg = config(5, 1, CLUSTER);
        cfg.link.queue_limit = 256 * 1024;
        cfg.idle_timeout = Duration::from_secs(20);
        let b = node_with(cfg, any_port());
        b.peers.set_peers(peer_set(&[(2, any_port())]));
        // A peer that shakes hands and then reads nothing.
        let _stuck = raw_peer(b.addr, &hello_bytes(CLUSTER, 2, 1)).await;
        until("connected", Duration::from_secs(5), || {
            connected(&b, 2).is_some()
        })
        .await;
        let body = bytes::Bytes::from(vec![7u8; 60 * 1024]);
        let publish = |id: u64| Forward::Publish {
            id,
            topic: "t".into(),
            defer_ms: 0,
            bodies: vec![body.clone()],
            origins: Vec::new(),
        };
        let mut refused = None;
        for id in 0..4000u64 {
            if let Err(e) = b.peers.send_forward(BrokerId(2), publish(id)) {
                refused = Some(e);
                break;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(refused, Some(SendError::Link(LinkSendError::Full)));
        let queued = stats(&b, 2).queued;
        assert!(queued <= 256 * 1024, "queued {queued}");
        // Replica messages and forwards share the bound.
        assert_eq!(
            b.peers.send(BrokerId(2), "t", append(1, 0, &[&body])),
            Err(SendError::Link(LinkSendError::Full))
        );
        assert_eq!(stats(&b, 2).queued, queued, "refused sends queue nothing");
    });
}
