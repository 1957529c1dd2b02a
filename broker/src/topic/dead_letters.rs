//! A dead-letter topic's origin records: for each message another topic's channel sent here
//! after its max attempts, where it came from (topic, channel, ID, attempts, publish time) and
//! where it is here (ID, seq), so `GET /dead_letters` can show them and `POST /topic/redrive`
//! can publish them back.
//!
//! Invariants: at most [`DEAD_LETTER_RECORDS`] records, oldest dropped first (the messages
//! themselves stay in the log; only their origin is forgotten); records are in seq order;
//! they live in the topic's `meta.json` (`dead_letters`, absent while empty), so a topic that
//! never received a dead letter keeps its metadata as before.

use super::Topic;
use crate::storage::meta::DeadLetterMeta;

/// Origin records a dead-letter topic keeps (the newest).
pub const DEAD_LETTER_RECORDS: usize = 10_000;

/// Bytes of a body shown in a record's preview.
pub const PREVIEW_BYTES: usize = 64;

/// Where a dead letter came from, as the origin's owner sends it with the message.
#[derive(Debug, Clone)]
pub struct DeadOrigin {
    pub topic: String,
    pub channel: String,
    pub id: protocol::MessageId,
    pub attempts: u16,
    pub timestamp: i64,
}

impl Topic {
    /// Records where the message now at `seq` with `id` came from.
    pub fn record_dead_letter(
        &mut self,
        origin: DeadOrigin,
        id: protocol::MessageId,
        seq: u64,
        body: &[u8],
        now_ns: i64,
    ) {
        let preview = &body[..body.len().min(PREVIEW_BYTES)];
        self.dead_letters.push_back(DeadLetterMeta {
            id: id.to_string(),
            seq,
            origin_topic: origin.topic,
            origin_channel: origin.channel,
            origin_id: origin.id.to_string(),
            attempts: origin.attempts,
            timestamp: origin.timestamp,
            dead_lettered_at: now_ns,
            body_size: body.len() as u64,
            preview: String::from_utf8_lossy(preview).into_owned(),
        });
        while self.dead_letters.len() > DEAD_LETTER_RECORDS {
            self.dead_letters.pop_front();
        }
    }

    /// The origin records, oldest first.
    pub fn dead_letter_records(&self) -> impl Iterator<Item = &DeadLetterMeta> {
        self.dead_letters.iter()
    }

    /// Takes a record from this topic's leader: appended when it follows the last one held
    /// (records stay in seq order), ignored otherwise; true when taken.
    pub fn append_dead_letter_record(&mut self, record: DeadLetterMeta) -> bool {
        if self
            .dead_letters
            .back()
            .is_some_and(|r| r.seq >= record.seq)
        {
            return false;
        }
        self.dead_letters.push_back(record);
        while self.dead_letters.len() > DEAD_LETTER_RECORDS {
            self.dead_letters.pop_front();
        }
        true
    }

    /// Drops every record (the leader's replace them).
    pub fn clear_dead_letter_records(&mut self) {
        self.dead_letters.clear();
    }

    /// Forgets the records of these IDs (redriven); returns how many went.
    pub fn forget_dead_letters(&mut self, ids: &[String]) -> usize {
        let before = self.dead_letters.len();
        self.dead_letters.retain(|r| !ids.contains(&r.id));
        before - self.dead_letters.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::log::TopicLog;
    use protocol::MessageId;

    fn origin(n: u64) -> DeadOrigin {
        DeadOrigin {
            topic: "orders".into(),
            channel: "c".into(),
            id: MessageId::from_u64(n),
            attempts: 3,
            timestamp: 1,
        }
    }

    #[test]
    fn records_are_bounded_oldest_first_and_forgotten_by_id() {
        let mut t = Topic::new("orders.dead", TopicLog::in_memory("orders.dead", 10), 10, 0);
        for n in 0..(DEAD_LETTER_RECORDS as u64 + 5) {
            t.record_dead_letter(origin(n), MessageId::from_u64(n + 100), n, &[b'x'; 100], 7);
        }
        assert_eq!(t.dead_letter_records().count(), DEAD_LETTER_RECORDS);
        let first = t.dead_letter_records().next().unwrap();
        assert_eq!(first.seq, 5);
        assert_eq!(first.preview.len(), PREVIEW_BYTES);
        assert_eq!(first.body_size, 100);
        assert_eq!(first.origin_id, MessageId::from_u64(5).to_string());
        let id = first.id.clone();
        assert_eq!(t.forget_dead_letters(std::slice::from_ref(&id)), 1);
        assert!(t.dead_letter_records().all(|r| r.id != id));
    }
}
