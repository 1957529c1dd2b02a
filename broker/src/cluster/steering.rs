//! Which lookup the session asks next (no I/O): the one that last answered as controller
//! leader; on `NotLeader` the lookup whose controller id the answer names, once learnt; on an
//! error or no answer, the next lookup in turn.
//!
//! Invariants: each lookup's controller id is learnt only from its own answers (the answers
//! name the node that gave them), and forgotten when its address leaves the list; the target is
//! always an index into the current list (none when the list is empty).

/// The lookups and what is known of them.
#[derive(Debug, Clone, Default)]
pub struct Steering {
    addrs: Vec<String>,
    /// The controller id each lookup gave in its answers (None: not heard yet).
    ids: Vec<Option<u64>>,
    target: usize,
}

impl Steering {
    pub fn new(addrs: Vec<String>) -> Self {
        let mut s = Self::default();
        s.set_addrs(addrs);
        s
    }

    /// A new list (`PUT /config/nsqlookupd_tcp_addresses`): what was learnt of the lookups
    /// still in it is kept, and so is the target if it is still there.
    pub fn set_addrs(&mut self, addrs: Vec<String>) {
        let target = self.target().map(str::to_owned);
        let ids = addrs
            .iter()
            .map(|a| {
                self.addrs
                    .iter()
                    .position(|b| b == a)
                    .and_then(|i| self.ids[i])
            })
            .collect();
        self.target = target
            .and_then(|t| addrs.iter().position(|a| *a == t))
            .unwrap_or(0);
        self.addrs = addrs;
        self.ids = ids;
    }

    /// How many lookups there are.
    pub fn lookups(&self) -> usize {
        self.addrs.len()
    }

    /// The lookup to ask now.
    pub fn target(&self) -> Option<&str> {
        self.addrs.get(self.target).map(String::as_str)
    }

    /// The target answered as node `controller`, and leads.
    pub fn answered(&mut self, controller: u64) {
        if let Some(id) = self.ids.get_mut(self.target) {
            *id = Some(controller);
        }
    }

    /// The target answered as node `controller` that it does not lead and that `leader` does
    /// (0: it knows no leader). Moves to the leader's lookup if its id is known, else to the
    /// next lookup not heard from yet, else to the next one.
    pub fn not_leader(&mut self, controller: u64, leader: u64) {
        self.answered(controller);
        if leader != 0 {
            if let Some(i) = self.ids.iter().position(|id| *id == Some(leader)) {
                self.target = i;
                return;
            }
        }
        let n = self.addrs.len();
        let unheard = (1..n)
            .map(|k| (self.target + k) % n)
            .find(|&i| self.ids[i].is_none());
        match unheard {
            Some(i) => self.target = i,
            None => self.failed(),
        }
    }

    /// No usable answer from the target: the next lookup.
    pub fn failed(&mut self) {
        if !self.addrs.is_empty() {
            self.target = (self.target + 1) % self.addrs.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Steering {
        Steering::new(vec!["a".into(), "b".into(), "c".into()])
    }

    #[test]
    fn follows_the_named_leader_once_its_id_is_known() {
        let mut s = three();
        assert_eq!(s.target(), Some("a"));
        // a is node 1 and names 3, whose lookup is not known yet: try the next unheard one.
        s.not_leader(1, 3);
        assert_eq!(s.target(), Some("b"));
        // b is node 2, also names 3: c is the last unheard one.
        s.not_leader(2, 3);
        assert_eq!(s.target(), Some("c"));
        s.answered(3);
        // Later, c (3) says 1 leads: straight to a.
        s.not_leader(3, 1);
        assert_eq!(s.target(), Some("a"));
        s.answered(1);
        // a is gone: next in turn.
        s.failed();
        assert_eq!(s.target(), Some("b"));
        // b names 3, known: c.
        s.not_leader(2, 3);
        assert_eq!(s.target(), Some("c"));
    }

    #[test]
    fn no_leader_known_moves_on_in_turn() {
        let mut s = three();
        for (who, want) in [(1, "b"), (2, "c"), (3, "a"), (1, "b")] {
            s.not_leader(who, 0);
            assert_eq!(s.target(), Some(want));
        }
    }

    #[test]
    fn a_new_list_keeps_what_was_learnt_of_the_lookups_still_in_it() {
        let mut s = three();
        s.not_leader(1, 0);
        s.answered(2);
        assert_eq!(s.target(), Some("b"));
        s.set_addrs(vec!["c".into(), "b".into()]);
        assert_eq!(s.target(), Some("b"));
        s.failed();
        assert_eq!(s.target(), Some("c"));
        // c (node 3) names node 2: b, learnt before the new list.
        s.not_leader(3, 2);
        assert_eq!(s.target(), Some("b"), "b is node 2");
        s.set_addrs(vec!["d".into()]);
        assert_eq!(s.target(), Some("d"));
        s.set_addrs(Vec::new());
        assert_eq!(s.target(), None);
        s.failed();
        s.not_leader(1, 1);
        assert_eq!(s.target(), None);
    }
}
