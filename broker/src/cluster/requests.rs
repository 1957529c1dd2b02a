//! The shards' requests to the controller (`CreateTopic`, `AlterIsr`) as the session carries
//! them, without I/O: the bounded queue they wait in ([`Queue`]) and how one is carried to the
//! controller leader ([`carry`], given the session's way of asking one lookup).
//!
//! Invariants: the queue never holds more than its limit (a request past it is handed back to
//! be answered at once); [`carry`] asks each lookup at most once per request, follows
//! `NotLeader` hints through the same [`Steering`] as the heartbeats, and always ends with the
//! controller's answer or the text of why no leader answered.

use super::steering::Steering;
use replication::controller::{BrokerReply, BrokerRequest};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;

/// Requests waiting for the session, at most.
pub const QUEUE_LIMIT: usize = 4096;

/// Requests in arrival order, each with where its answer goes.
#[derive(Debug)]
pub struct Queue<R> {
    waiting: VecDeque<(BrokerRequest, R)>,
    limit: usize,
}

impl<R> Queue<R> {
    pub fn new(limit: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            limit,
        }
    }

    /// Queues a request; `Err` hands it back when the queue is full.
    pub fn push(&mut self, request: BrokerRequest, reply: R) -> Result<(), (BrokerRequest, R)> {
        if self.waiting.len() >= self.limit {
            return Err((request, reply));
        }
        self.waiting.push_back((request, reply));
        Ok(())
    }

    pub fn pop(&mut self) -> Option<(BrokerRequest, R)> {
        self.waiting.pop_front()
    }
}

/// Carries one request: asks the steering's target, then wherever `NotLeader` points or the
/// next lookup after a failure, each lookup at most once. `ask(lookup)` sends the request to
/// that lookup and gives the answering controller's id and its reply, or why there was none.
/// `Ok((controller, reply))`: the leader's answer; `Err`: why no leader answered.
pub async fn carry<F, Fut>(
    steering: &RefCell<Steering>,
    mut ask: F,
) -> Result<(u64, BrokerReply), String>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<(u64, BrokerReply), String>>,
{
    let lookups = steering.borrow().lookups();
    if lookups == 0 {
        return Err("no controller leader answered: no lookups to ask".into());
    }
    let mut last = String::new();
    for _ in 0..lookups {
        let Some(addr) = steering.borrow().target().map(str::to_owned) else {
            break;
        };
        match ask(addr.clone()).await {
            Ok((controller, BrokerReply::NotLeader { leader })) => {
                steering.borrow_mut().not_leader(controller, leader);
                last = format!("{addr}: controller {controller} does not lead");
            }
            Ok((controller, BrokerReply::Heartbeat { .. })) => {
                // Only a heartbeat is answered so: this lookup is confused; try the next.
                steering.borrow_mut().failed();
                last = format!("{addr}: controller {controller} answered with a view");
            }
            Ok((controller, reply)) => {
                steering.borrow_mut().answered(controller);
                return Ok((controller, reply));
            }
            Err(e) => {
                steering.borrow_mut().failed();
                last = format!("{addr}: {e}");
            }
        }
    }
    Err(format!(
        "no controller leader answered ({lookups} lookups asked; last: {last})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::block_on;
    use std::collections::HashMap;

    fn create(name: &str) -> BrokerRequest {
        BrokerRequest::CreateTopic {
            name: name.into(),
            replicas: 3,
            min_insync: 2,
        }
    }

    fn three() -> RefCell<Steering> {
        RefCell::new(Steering::new(vec!["a".into(), "b".into(), "c".into()]))
    }

    /// Lookups that answer as `answers` says (controller id, reply); absent ones fail.
    fn run(
        steering: &RefCell<Steering>,
        answers: &HashMap<&str, (u64, BrokerReply)>,
    ) -> (Result<(u64, BrokerReply), String>, Vec<String>) {
        let asked = RefCell::new(Vec::new());
        let out = block_on(carry(steering, |addr| {
            asked.borrow_mut().push(addr.clone());
            let answer = answers
                .get(addr.as_str())
                .cloned()
                .ok_or_else(|| "connect: refused".to_string());
            async move { answer }
        }));
        (out, asked.into_inner())
    }

    #[test]
    fn the_queue_is_bounded_and_hands_back_what_does_not_fit() {
        let mut q = Queue::new(2);
        assert!(q.push(create("a"), 1).is_ok());
        assert!(q.push(create("b"), 2).is_ok());
        let Err((back, reply)) = q.push(create("c"), 3) else {
            panic!("a full queue took a request");
        };
        assert_eq!((back, reply), (create("c"), 3));
        assert_eq!(q.waiting.len(), 2);
        assert_eq!(q.pop().map(|(_, r)| r), Some(1));
        assert!(q.push(create("d"), 4).is_ok());
        assert_eq!(q.pop().map(|(_, r)| r), Some(2));
        assert_eq!(q.pop().map(|(_, r)| r), Some(4));
        assert!(q.pop().is_none());
        assert_eq!(Queue::<u8>::new(QUEUE_LIMIT).limit, 4096);
    }

    #[test]
    fn follows_not_leader_to_the_leader_and_returns_its_answer() {
        let s = three();
        let answers = HashMap::from([
            ("a", (1, BrokerReply::NotLeader { leader: 3 })),
            ("b", (2, BrokerReply::NotLeader { leader: 3 })),
            ("c", (3, BrokerReply::Proposed)),
        ]);
        let (out, asked) = run(&s, &answers);
        assert_eq!(out, Ok((3, BrokerReply::Proposed)));
        assert_eq!(asked, ["a", "b", "c"]);
        // The next request goes straight to the leader's lookup.
        let (out, asked) = run(&s, &answers);
        assert_eq!(out, Ok((3, BrokerReply::Proposed)));
        assert_eq!(asked, ["c"]);
        // A refusal is the leader's answer too, passed on as it is.
        let refused = BrokerReply::Refused {
            reason: "not the leader of t".into(),
        };
        let answers = HashMap::from([("c", (3, refused.clone()))]);
        assert_eq!(run(&s, &answers).0, Ok((3, refused)));
    }

    #[test]
    fn no_leader_is_an_error_after_asking_each_lookup_once() {
        let s = three();
        let answers = HashMap::from([
            ("a", (1, BrokerReply::NotLeader { leader: 0 })),
            ("b", (2, BrokerReply::NotLeader { leader: 0 })),
        ]);
        let (out, asked) = run(&s, &answers);
        let e = out.unwrap_err();
        assert!(e.contains("no controller leader answered"), "{e}");
        assert!(e.contains("c: connect: refused"), "{e}");
        assert_eq!(asked, ["a", "b", "c"]);
        // Everything down: each once, still.
        let (out, asked) = run(&s, &HashMap::new());
        assert!(out.is_err());
        assert_eq!(asked.len(), 3);
        // A view is no answer to a request.
        let view = BrokerReply::Heartbeat {
            update: replication::controller::ViewUpdate::Deltas(Vec::new()),
        };
        let answers = HashMap::from([("a", (1, view.clone())), ("b", (1, view.clone()))]);
        assert!(run(
            &RefCell::new(Steering::new(vec!["a".into(), "b".into()])),
            &answers
        )
        .0
        .is_err());
    }

    #[test]
    fn without_lookups_the_answer_is_an_error_at_once() {
        let s = RefCell::new(Steering::new(Vec::new()));
        let (out, asked) = run(&s, &HashMap::new());
        assert!(out.unwrap_err().contains("no lookups"));
        assert!(asked.is_empty());
    }
}
