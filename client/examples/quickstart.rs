//! The README's quick start with the Rust client: publishes one message to topic `events`,
//! then consumes on channel `archive` for a second and prints what arrives.
//!
//! ```text
//! cargo run --release -p client --example quickstart
//! ```

use client::{Consumer, ConsumerConfig, HandlerResult, Message, Producer};
use std::time::Duration;

fn main() -> Result<(), client::Error> {
    glommio::LocalExecutor::default().run(async {
        let producer = Producer::connect("127.0.0.1:4150").await?;
        producer.publish("events", "hello").await?;
        producer.stop();

        let config = ConsumerConfig::new("events", "archive");
        let consumer = Consumer::new(config, |msg: Message| {
            println!("{}", String::from_utf8_lossy(msg.body()));
            async { HandlerResult::Finish }
        })?;
        consumer.connect_to_nsqd("127.0.0.1:4150").await?;
        glommio::timer::sleep(Duration::from_secs(1)).await;
        consumer.stop().await;
        Ok(())
    })
}
