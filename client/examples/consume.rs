//! Consumes messages from a broker and prints them.
//!
//! ```text
//! cargo run -p client --example consume -- 127.0.0.1:4150 events archive [count]
//! ```
//!
//! Stops after `count` messages when given, otherwise runs until killed.

use client::{Consumer, ConsumerConfig, HandlerResult, Message};
use glommio::LocalExecutor;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, topic, channel, limit) = match args.as_slice() {
        [a, t, c] => (a.clone(), t.clone(), c.clone(), None),
        [a, t, c, n] => match n.parse::<u64>() {
            Ok(n) => (a.clone(), t.clone(), c.clone(), Some(n)),
            Err(_) => usage(),
        },
        _ => usage(),
    };
    let result = LocalExecutor::default().run(async move {
        let seen = Rc::new(Cell::new(0u64));
        let counter = seen.clone();
        let config = ConsumerConfig::new(topic, channel).max_in_flight(32);
        let consumer = Consumer::new(config, move |msg: Message| {
            counter.set(counter.get() + 1);
            println!(
                "{} (attempt {}): {}",
                msg.id(),
                msg.attempts(),
                String::from_utf8_lossy(msg.body())
            );
            async { HandlerResult::Finish }
        })?;
        consumer.connect_to_nsqd(addr).await?;
        loop {
            glommio::timer::sleep(Duration::from_millis(100)).await;
            if limit.is_some_and(|n| seen.get() >= n) {
                break;
            }
        }
        consumer.stop().await;
        Ok::<u64, client::Error>(seen.get())
    });
    match result {
        Ok(n) => println!("consumed {n} message(s)"),
        Err(e) => {
            eprintln!("consume failed: {e}");
            std::process::exit(1);
        }
    }
}

fn usage() -> ! {
    eprintln!("usage: consume <broker host:port> <topic> <channel> [count]");
    std::process::exit(2);
}
