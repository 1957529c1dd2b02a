//! `client::admin` against the real `broker` binary: a channel created from a past offset
//! receives exactly the messages from there, in order; a rewind replays them again; the
//! broker's refusals come back with their status and message.

mod support;

use client::admin::{create_channel_from, rewind, From};
use client::{Consumer, ConsumerConfig, Error, HandlerResult, Message, Producer};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use support::{eventually, run};
use test_harness::{binary, start_broker, Started};

const WAIT: Duration = Duration::from_secs(20);

#[test]
fn a_channel_from_the_past_and_a_rewind_replay_in_order() {
    let Started { proc, tcp, http } =
        start_broker(&binary("broker"), "client-replay", &["--shards", "1"]);
    let _proc = proc;
    run(move || async move {
        let p = Producer::connect(tcp.clone()).await.expect("producer");
        let batch: Vec<_> = (0..20).map(|i| format!("m{i:02}").into()).collect();
        p.multi_publish("rp", batch).await.expect("mpub");
        create_channel_from(&http, "rp", "late", From::Offset(5), WAIT)
            .await
            .expect("created from offset 5");
        let seen: Rc<RefCell<Vec<String>>> = Rc::default();
        let s = seen.clone();
        let cfg = ConsumerConfig::new("rp", "late").max_in_flight(1);
        let c = Consumer::new(cfg, move |m: Message| {
            s.borrow_mut()
                .push(String::from_utf8_lossy(m.body()).into_owned());
            async { HandlerResult::Finish }
        })
        .expect("consumer");
        c.connect_to_nsqd(tcp.clone()).await.expect("subscribe");
        let want: Vec<String> = (5..20).map(|i| format!("m{i:02}")).collect();
        assert!(eventually(WAIT, || seen.borrow().len() >= want.len()).await);
        assert_eq!(*seen.borrow(), want);
        rewind(&http, "rp", "late", From::Offset(18), WAIT)
            .await
            .expect("rewound");
        assert!(eventually(WAIT, || seen.borrow().len() >= want.len() + 2).await);
        assert_eq!(seen.borrow()[want.len()..], ["m18", "m19"]);
        c.stop().await;
        match rewind(&http, "rp", "late", From::Offset(99), WAIT).await {
            Err(Error::Refused {
                status: 400,
                message,
            }) => {
                assert_eq!(message, "REWIND_PAST_END: the log ends at offset 20")
            }
            other => panic!("{other:?}"),
        }
        match rewind(&http, "rp", "nope", From::Earliest, WAIT).await {
            Err(Error::Refused {
                status: 404,
                message,
            }) => assert_eq!(message, "CHANNEL_NOT_FOUND"),
            other => panic!("{other:?}"),
        }
        p.stop();
    });
}
