//! The README's quick start with the Rust client: subscribes to topic `events` on channel
//! `archive`, publishes one message, and prints what arrives within a second.
//!
//! ```text
//! cargo run --release -p client --example quickstart
//! ```

use client::{Consumer, ConsumerConfig, HandlerResult, Message, Producer};
use std::time::Duration;

fn main() -> Result<(), client::Error> {
    glommio::LocalExecutor::default().run(async {
        // Subscribe first: a channel gets the messages published after it exists.
        let config = ConsumerConfig::new("events", "archive");
        let consumer = Consumer::new(config, |msg: Message| {
            println!("{}", String::from_utf8_lossy(msg.body()));
            async { HandlerResult::Finish }
        })?;
        consumer.connect_to_nsqd("127.0.0.1:4150").await?;

        let producer = Producer::connect("127.0.0.1:4150").await?;
        producer.publish("events", "hello").await?;
        producer.stop();
        glommio::timer::sleep(Duration::from_secs(1)).await;
        consumer.stop().await;
        Ok(())
    })
}
