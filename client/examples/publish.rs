//! Publishes messages to a broker.
//!
//! ```text
//! cargo run -p client --example publish -- 127.0.0.1:4150 events hello world
//! ```
//!
//! Each argument after the topic is one message; with none, each line of standard input is.

use client::Producer;
use glommio::LocalExecutor;
use std::io::BufRead;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, topic, messages @ ..] = args.as_slice() else {
        eprintln!("usage: publish <broker host:port> <topic> [message ...]");
        std::process::exit(2);
    };
    let mut bodies: Vec<String> = messages.to_vec();
    if bodies.is_empty() {
        bodies = std::io::stdin()
            .lock()
            .lines()
            .map_while(Result::ok)
            .collect();
    }
    let (addr, topic) = (addr.clone(), topic.clone());
    let result = LocalExecutor::default().run(async move {
        let producer = Producer::connect(addr).await?;
        for body in &bodies {
            producer.publish(&topic, body.clone()).await?;
        }
        producer.stop();
        Ok::<usize, client::Error>(bodies.len())
    });
    match result {
        Ok(n) => println!("published {n} message(s)"),
        Err(e) => {
            eprintln!("publish failed: {e}");
            std::process::exit(1);
        }
    }
}
