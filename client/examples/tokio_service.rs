//! A tokio service that publishes and consumes with the client. The service's own tasks are
//! ordinary `Send` tasks on a multi-thread runtime; the client's state is single-threaded, so
//! it runs on a thread of its own, in a `LocalSet`, and the tasks reach its producer through a
//! channel (each publish answered on a oneshot).
//!
//! ```text
//! cargo run -p client --example tokio_service -- 127.0.0.1:4150 events [count]
//! ```

use client::{Consumer, ConsumerConfig, HandlerResult, Message, Producer};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// A publish asked of the client's thread, and where its outcome goes.
type Publish = (String, oneshot::Sender<client::Result<()>>);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, topic, count) = match args.as_slice() {
        [a, t] => (a.clone(), t.clone(), 100),
        [a, t, n] => match n.parse::<u64>() {
            Ok(n) => (a.clone(), t.clone(), n),
            Err(_) => usage(),
        },
        _ => usage(),
    };
    let (tx, rx) = mpsc::channel::<Publish>(1024);
    let client = std::thread::spawn(move || client_thread(addr, topic, count, rx));

    // The service: many Send tasks, each publishing through the client's thread.
    let service = tokio::runtime::Runtime::new().expect("a tokio runtime");
    service.block_on(async move {
        let mut tasks = Vec::new();
        for i in 0..count {
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                let (reply, answer) = oneshot::channel();
                tx.send((format!("message {i}"), reply))
                    .await
                    .map_err(|_| "the client's thread is gone".to_string())?;
                match answer.await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err("no answer".to_string()),
                }
            }));
        }
        let mut failed = 0;
        for t in tasks {
            let outcome = t.await.map_err(|e| e.to_string()).and_then(|r| r);
            if let Err(e) = outcome {
                if failed == 0 {
                    eprintln!("publish failed: {e}");
                }
                failed += 1;
            }
        }
        if failed > 0 {
            eprintln!("{failed} of {count} publishes failed");
        }
    });
    match client.join() {
        Ok(Ok(received)) => println!("published and received {received} messages"),
        Ok(Err(e)) => {
            eprintln!("client error: {e}");
            std::process::exit(1);
        }
        Err(_) => std::process::exit(1),
    }
}

/// The client's thread: a producer serving the channel, and a consumer counting what comes
/// back (at most 10 s after the last publish).
fn client_thread(
    addr: String,
    topic: String,
    count: u64,
    mut rx: mpsc::Receiver<Publish>,
) -> client::Result<u64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, async move {
        let producer = Producer::connect(addr.clone()).await?;
        let received = Rc::new(Cell::new(0u64));
        let r = received.clone();
        let config = ConsumerConfig::new(topic.clone(), "tokio-example").max_in_flight(100);
        let consumer = Consumer::new(config, move |_msg: Message| {
            r.set(r.get() + 1);
            async { HandlerResult::Finish }
        })?;
        consumer.connect_to_nsqd(addr).await?;
        while let Some((body, reply)) = rx.recv().await {
            let _ = reply.send(producer.publish(&topic, body).await);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while received.get() < count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        consumer.stop().await;
        producer.stop();
        Ok(received.get())
    })
}

fn usage() -> ! {
    eprintln!("usage: tokio_service <host:port> <topic> [count]");
    std::process::exit(2);
}
