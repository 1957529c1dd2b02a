use super::*;

fn t0() -> Instant {
    Instant::now()
}

fn first(_: usize) -> usize {
    0
}

/// Applies updates to a map of "what the broker believes", like a broker would.
fn apply(broker: &mut BTreeMap<ConnId, u64>, updates: &[RdyUpdate]) {
    for u in updates {
        broker.insert(u.conn, u.count);
    }
}

fn assert_invariants(s: &RdyState) {
    assert!(
        s.total_rdy() <= s.max_in_flight(),
        "sum of RDY {} > max_in_flight {}",
        s.total_rdy(),
        s.max_in_flight()
    );
    assert!(
        s.total_in_flight() <= s.max_in_flight(),
        "in flight {} > max_in_flight {}",
        s.total_in_flight(),
        s.max_in_flight()
    );
    for c in s.conns.values() {
        assert!(
            c.last_rdy <= c.max_rdy,
            "RDY above the broker's max_rdy_count"
        );
    }
}

#[test]
fn a_new_connection_starts_at_rdy_1() {
    let now = t0();
    let mut s = RdyState::new(100, Duration::from_secs(10));
    assert_eq!(s.add_conn(1, 2500, now), [RdyUpdate { conn: 1, count: 1 }]);
    assert_eq!(s.add_conn(2, 2500, now), [RdyUpdate { conn: 2, count: 1 }]);
    assert_eq!(s.total_rdy(), 2);
}

#[test]
fn tick_spreads_max_in_flight_evenly_rounding_down() {
    let now = t0();
    let mut s = RdyState::new(10, Duration::from_secs(10));
    for id in 1..=3 {
        s.add_conn(id, 2500, now);
    }
    let ups = s.tick(now, &mut first);
    assert_eq!(ups.len(), 3);
    for id in 1..=3 {
        assert_eq!(s.rdy_of(id), Some(3));
    }
    assert_eq!(s.total_rdy(), 9);
    assert_invariants(&s);
}

#[test]
fn a_joining_connection_lowers_the_others_to_the_new_share() {
    let now = t0();
    let mut s = RdyState::new(10, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.tick(now, &mut first);
    assert_eq!(s.rdy_of(1), Some(10));
    let ups = s.add_conn(2, 2500, now);
    assert_eq!(
        ups,
        [
            RdyUpdate { conn: 1, count: 5 },
            RdyUpdate { conn: 2, count: 1 }
        ]
    );
    s.tick(now, &mut first);
    assert_eq!((s.rdy_of(1), s.rdy_of(2)), (Some(5), Some(5)));
}

#[test]
fn a_joining_connection_waits_while_the_budget_is_in_flight() {
    let now = t0();
    let mut s = RdyState::new(4, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.tick(now, &mut first);
    for _ in 0..4 {
        s.on_message(1, now);
    }
    // All 4 in flight on conn 1: conn 2 may not have RDY until some are handled.
    assert_eq!(s.add_conn(2, 2500, now), [RdyUpdate { conn: 1, count: 2 }]);
    assert_eq!(s.rdy_of(2), Some(0));
    assert_invariants(&s);
    s.on_message_done(1, now);
    s.on_message_done(1, now);
    assert_eq!(s.on_message_done(2, now), [RdyUpdate { conn: 2, count: 2 }]);
    assert_invariants(&s);
}

#[test]
fn rdy_never_exceeds_the_brokers_max_rdy_count() {
    let now = t0();
    let mut s = RdyState::new(1000, Duration::from_secs(10));
    s.add_conn(1, 20, now);
    s.add_conn(2, 2500, now);
    s.tick(now, &mut first);
    assert_eq!(s.rdy_of(1), Some(20));
    assert_eq!(s.rdy_of(2), Some(500));
    let mut zero = RdyState::new(10, Duration::from_secs(10));
    assert!(zero.add_conn(1, 0, now).is_empty());
}

#[test]
fn rdy_is_resent_when_it_falls_to_a_quarter_of_the_last_value() {
    let now = t0();
    let mut s = RdyState::new(8, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.tick(now, &mut first);
    assert_eq!(s.rdy_of(1), Some(8));
    for i in 0..5 {
        assert!(s.on_message(1, now).is_empty(), "no refresh at message {i}");
        s.on_message_done(1, now);
    }
    // 8 - 6 = 2 left, which is 25% of 8.
    assert_eq!(s.on_message(1, now), [RdyUpdate { conn: 1, count: 8 }]);
}

#[test]
fn refresh_at_rdy_1_keeps_a_single_connection_flowing() {
    let now = t0();
    let mut s = RdyState::new(1, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    assert_eq!(s.on_message(1, now), [RdyUpdate { conn: 1, count: 1 }]);
    assert!(s.on_message_done(1, now).is_empty());
}

#[test]
fn removing_a_connection_gives_its_share_to_the_others() {
    let now = t0();
    let mut s = RdyState::new(10, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.add_conn(2, 2500, now);
    s.tick(now, &mut first);
    assert_eq!(s.remove_conn(2, now), [RdyUpdate { conn: 1, count: 10 }]);
}

#[test]
fn retiring_a_connection_frees_its_rdy_but_not_its_in_flight() {
    let now = t0();
    let mut s = RdyState::new(10, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.add_conn(2, 2500, now);
    s.tick(now, &mut first);
    for _ in 0..3 {
        s.on_message(2, now);
    }
    // Conn 2 still holds 3 in flight, so conn 1 may have 7 and not 10.
    assert_eq!(s.retire_conn(2, now), [RdyUpdate { conn: 1, count: 7 }]);
    assert_invariants(&s);
    s.on_message_done(2, now);
    assert_eq!(s.rdy_of(2), Some(0));
}

#[test]
fn with_fewer_max_in_flight_than_connections_rdy_moves_off_idle_connections() {
    let idle = Duration::from_secs(10);
    let now = t0();
    let mut s = RdyState::new(2, idle);
    for id in 1..=5 {
        s.add_conn(id, 2500, now);
    }
    // Bootstrap: only the first two fit.
    assert_eq!(s.total_rdy(), 2);
    assert_eq!(
        (s.rdy_of(1), s.rdy_of(2), s.rdy_of(3)),
        (Some(1), Some(1), Some(0))
    );
    // Before the idle timeout nothing moves.
    assert!(s.tick(now + idle / 2, &mut first).is_empty());
    // Conn 1 keeps receiving; conn 2 stays idle.
    let later = now + idle;
    s.on_message(1, later - Duration::from_secs(1));
    s.on_message_done(1, later - Duration::from_secs(1));
    let ups = s.tick(later, &mut first);
    assert_eq!(
        ups,
        [
            RdyUpdate { conn: 2, count: 0 },
            RdyUpdate { conn: 3, count: 1 }
        ]
    );
    assert_eq!(s.rdy_of(1), Some(1));
    assert_invariants(&s);
    // Conn 3 gets a full idle period before it is judged.
    assert!(s.tick(later + idle / 2, &mut first).is_empty());
    let ups = s.tick(later + idle + Duration::from_secs(1), &mut |n| n - 1);
    assert_invariants(&s);
    assert_eq!(s.total_rdy(), 2);
    assert!(ups.contains(&RdyUpdate { conn: 3, count: 0 }));
}

#[test]
fn redistribution_never_strands_the_budget_when_everyone_is_idle() {
    let idle = Duration::from_secs(1);
    let now = t0();
    let mut s = RdyState::new(1, idle);
    s.add_conn(1, 2500, now);
    s.add_conn(2, 2500, now);
    for step in 1..10u32 {
        s.tick(now + idle * step, &mut first);
        assert_eq!(s.total_rdy(), 1, "step {step}");
    }
}

#[test]
fn pause_probe_resume_follow_backoff() {
    let now = t0();
    let mut s = RdyState::new(9, Duration::from_secs(10));
    for id in 1..=3 {
        s.add_conn(id, 2500, now);
    }
    s.tick(now, &mut first);
    let ups = s.pause();
    assert_eq!(ups.len(), 3);
    assert!(ups.iter().all(|u| u.count == 0));
    assert_eq!(s.total_rdy(), 0);
    // Nothing moves while paused: no tick, no refresh, no raise.
    assert!(s.tick(now, &mut first).is_empty());
    assert!(s.on_message_done(1, now).is_empty());
    let ups = s.probe(now, &mut |_| 1);
    assert_eq!(ups, [RdyUpdate { conn: 2, count: 1 }]);
    // The probe message does not trigger a refresh: one result per window.
    assert!(s.on_message(2, now).is_empty());
    assert!(s.on_message_done(2, now).is_empty());
    // A new connection during probing gets nothing.
    assert!(s.add_conn(4, 2500, now).is_empty());
    let ups = s.resume(now);
    assert_eq!(ups.len(), 4);
    assert_eq!(s.total_rdy(), 8);
}

#[test]
fn a_probe_without_budget_is_retried_on_tick() {
    let now = t0();
    let mut s = RdyState::new(1, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.add_conn(2, 2500, now);
    s.on_message(1, now);
    s.retire_conn(1, now);
    s.pause();
    // The one message allowed is still in flight on the leaving connection.
    assert!(s.probe(now, &mut first).is_empty());
    assert!(s.tick(now, &mut first).is_empty());
    s.on_message_done(1, now);
    assert_eq!(s.tick(now, &mut first), [RdyUpdate { conn: 2, count: 1 }]);
}

#[test]
fn a_probe_on_a_vanished_connection_moves_elsewhere() {
    let now = t0();
    let mut s = RdyState::new(4, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.add_conn(2, 2500, now);
    s.pause();
    assert_eq!(s.probe(now, &mut first), [RdyUpdate { conn: 1, count: 1 }]);
    assert!(s.remove_conn(1, now).is_empty());
    assert_eq!(s.tick(now, &mut first), [RdyUpdate { conn: 2, count: 1 }]);
}

#[test]
fn starvation_is_85_percent_of_last_rdy_in_flight() {
    let now = t0();
    let mut s = RdyState::new(20, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.tick(now, &mut first);
    assert!(!s.is_starved());
    for _ in 0..16 {
        s.on_message(1, now);
    }
    assert!(!s.is_starved());
    s.on_message(1, now);
    assert!(s.is_starved());
}

#[test]
fn max_in_flight_can_change_at_run_time() {
    let now = t0();
    let mut s = RdyState::new(10, Duration::from_secs(10));
    s.add_conn(1, 2500, now);
    s.tick(now, &mut first);
    assert_eq!(
        s.set_max_in_flight(0, now),
        [RdyUpdate { conn: 1, count: 0 }]
    );
    assert_eq!(
        s.set_max_in_flight(6, now),
        [RdyUpdate { conn: 1, count: 6 }]
    );
}

/// A tiny deterministic generator, so the model test needs no dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Random runs against a model broker that delivers only while in-flight is below the RDY
/// it was sent: the sum of RDY and the messages in flight never pass max_in_flight, whatever
/// happens to connections, backoff or time.
#[test]
fn model_sum_of_rdy_and_in_flight_never_exceed_max_in_flight() {
    for seed in 1..=300u64 {
        let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let max_in_flight = 1 + rng.below(12) as u64;
        let idle = Duration::from_secs(5);
        let start = t0();
        let mut now = start;
        let mut s = RdyState::new(max_in_flight, idle);
        let mut broker: BTreeMap<ConnId, u64> = BTreeMap::new();
        let mut in_flight: BTreeMap<ConnId, u64> = BTreeMap::new();
        let mut next_id = 1;
        for _step in 0..400 {
            let ups = match rng.below(10) {
                0 => {
                    let id = next_id;
                    next_id += 1;
                    in_flight.insert(id, 0);
                    broker.insert(id, 0);
                    let max_rdy = [1, 3, 2500][rng.below(3)];
                    s.add_conn(id, max_rdy, now)
                }
                1 if !broker.is_empty() => {
                    let ids: Vec<_> = broker.keys().copied().collect();
                    let id = ids[rng.below(ids.len())];
                    broker.remove(&id);
                    in_flight.remove(&id);
                    s.remove_conn(id, now)
                }
                2 | 3 => {
                    // The broker delivers on a connection that has room by its RDY.
                    let open: Vec<_> = broker
                        .iter()
                        .filter(|(id, &rdy)| in_flight[*id] < rdy)
                        .map(|(&id, _)| id)
                        .collect();
                    if open.is_empty() {
                        continue;
                    }
                    let id = open[rng.below(open.len())];
                    *in_flight.entry(id).or_default() += 1;
                    s.on_message(id, now)
                }
                4 | 5 => {
                    let busy: Vec<_> = in_flight
                        .iter()
                        .filter(|(_, &n)| n > 0)
                        .map(|(&id, _)| id)
                        .collect();
                    if busy.is_empty() {
                        continue;
                    }
                    let id = busy[rng.below(busy.len())];
                    *in_flight.entry(id).or_default() -= 1;
                    s.on_message_done(id, now)
                }
                6 => {
                    now += Duration::from_secs(1 + rng.below(6) as u64);
                    s.tick(now, &mut |n| rng.below(n))
                }
                7 => match rng.below(4) {
                    0 => s.pause(),
                    1 => s.probe(now, &mut |n| rng.below(n)),
                    2 => s.resume(now),
                    _ => {
                        // Messages already in flight cannot be recalled: never go below them.
                        let floor = s.total_in_flight().max(1);
                        s.set_max_in_flight(floor.max(1 + rng.below(12) as u64), now)
                    }
                },
                _ => s.tick(now, &mut |n| rng.below(n)),
            };
            apply(&mut broker, &ups);
            assert_invariants(&s);
            let broker_total: u64 = broker.values().sum();
            assert!(
                broker_total <= s.max_in_flight(),
                "seed {seed}: broker RDY sum"
            );
            let flying: u64 = in_flight.values().sum();
            assert_eq!(
                flying,
                s.total_in_flight(),
                "seed {seed}: in-flight bookkeeping"
            );
            for (id, &rdy) in &broker {
                assert_eq!(
                    s.rdy_of(*id),
                    Some(rdy),
                    "seed {seed}: state and broker agree"
                );
            }
        }
    }
}
