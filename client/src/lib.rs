//! An NSQ client: a [`Producer`] that publishes and a [`Consumer`] that follows every rule of
//! NSQ's "Building Client Libraries" guide (discovery, RDY distribution, backoff, message
//! handling, heartbeats, reconnection).
//!
//! The wire format comes from the [`protocol`] crate; this crate adds the behaviour. The
//! connection code ([`conn`]) is written against futures-lite's `AsyncRead + AsyncWrite` and
//! names no runtime; the producer, the consumer and the lookup poller run on glommio or on
//! tokio (features `glommio` and `tokio`, both on by default; TCP, timers and task spawning
//! all live in one private module, which asks per call which runtime runs the thread). Their
//! state is single-threaded (`Rc`): on glommio use them inside an executor; on tokio inside a
//! `tokio::task::LocalSet` (see "On tokio" below).
//!
//! # Publishing
//!
//! ```no_run
//! use client::Producer;
//! use glommio::LocalExecutor;
//!
//! LocalExecutor::default().run(async {
//!     let producer = Producer::connect("127.0.0.1:4150").await?;
//!     producer.publish("events", "hello").await?;
//!     producer
//!         .multi_publish("events", vec!["a".into(), "b".into()])
//!         .await?;
//!     producer
//!         .deferred_publish("events", std::time::Duration::from_secs(5), "later")
//!         .await?;
//!     Ok::<(), client::Error>(())
//! })
//! .expect("publish failed");
//! ```
//!
//! # TLS, compression, AUTH
//!
//! As in go-nsq, each is a setting of [`ProducerConfig`] and [`ConsumerConfig`] ([`Features`]):
//!
//! ```no_run
//! use client::{ProducerConfig, TlsConfig};
//! let config = ProducerConfig::new()
//!     .tls_v1(true)
//!     .tls_config(TlsConfig::default().root_ca_file("ca.pem"))
//!     .snappy(true)
//!     .auth_secret("s3cret");
//! ```
//!
//! Outside an executor, [`blocking::Producer`] publishes from the calling thread over a plain
//! `std::net::TcpStream`:
//!
//! ```no_run
//! let mut producer = client::blocking::Producer::connect("127.0.0.1:4150")?;
//! producer.publish("events", "hello")?;
//! # Ok::<(), client::Error>(())
//! ```
//!
//! # Consuming
//!
//! ```no_run
//! use client::{Consumer, ConsumerConfig, HandlerResult, Message};
//! use glommio::LocalExecutor;
//!
//! LocalExecutor::default().run(async {
//!     let config = ConsumerConfig::new("events", "archive").max_in_flight(50);
//!     let consumer = Consumer::new(config, |msg: Message| async move {
//!         println!("{:?}", msg.body());
//!         HandlerResult::Finish
//!     })?;
//!     consumer.on_give_up(|msg| eprintln!("dropping {} after {} attempts", msg.id(), msg.attempts()));
//!     consumer.connect_to_lookupd("127.0.0.1:4161").await?;
//!     // ... later:
//!     consumer.stop().await;
//!     Ok::<(), client::Error>(())
//! })
//! .expect("consume failed");
//! ```
//!
//! A handler that holds messages to answer them later (batching, FIN only once its batch is
//! durable) takes each message with its [`Pending`] answer, no task per held message:
//!
//! ```no_run
//! use client::{answer_all, Consumer, ConsumerConfig, HandlerResult, Message, Pending};
//! use std::{cell::RefCell, rc::Rc};
//!
//! glommio::LocalExecutor::default().run(async {
//!     let held: Rc<RefCell<Vec<Pending>>> = Rc::default();
//!     let h = held.clone();
//!     let consumer = Consumer::new_deferred(ConsumerConfig::new("events", "archive"),
//!         move |msg: Message, answer: Pending| {
//!             // ... keep msg.body() somewhere ...
//!             h.borrow_mut().push(answer);
//!         })?;
//!     consumer.connect_to_nsqd("127.0.0.1:4150").await?;
//!     // ... once the batch is stored:
//!     answer_all(held.take(), HandlerResult::Finish);
//!     Ok::<(), client::Error>(())
//! })
//! .expect("consume failed");
//! ```
//!
//! # On tokio
//!
//! The same types and calls, inside a `LocalSet` (its tasks are `spawn_local` ones). On a
//! multi-thread runtime, give the client one thread of its own: a `LocalSet` there, fed by a
//! `tokio::sync::mpsc` channel from the service's `Send` tasks.
//!
//! ```no_run
//! use client::{Consumer, ConsumerConfig, HandlerResult, Message, Producer};
//!
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! tokio::task::LocalSet::new().block_on(&rt, async {
//!     let producer = Producer::connect("127.0.0.1:4150").await?;
//!     producer.publish("events", "hello").await?;
//!     let consumer = Consumer::new(ConsumerConfig::new("events", "archive"), |msg: Message| async move {
//!         println!("{:?}", msg.body());
//!         HandlerResult::Finish
//!     })?;
//!     consumer.connect_to_lookupd("127.0.0.1:4161").await?;
//!     Ok::<(), client::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Modules
//!
//! - [`config`]: producer and consumer settings with builder setters;
//! - [`error`]: the crate's one error type;
//! - [`conn`]: one broker connection (reader, writer, reply matching);
//! - [`handshake`]: IDENTIFY and what it switches on (TLS, compression, AUTH), then SUB;
//! - [`transport`], [`tls`]: the layers between the socket and the frames (the codecs are
//!   `protocol::compress`'s, the broker's own);
//! - [`producer`], [`consumer`], [`message`]: the public face ([`Consumer::new`] for handlers
//!   that answer by returning, [`Consumer::new_deferred`] for ones that hold messages and answer
//!   later, in batches, with [`Pending`] / [`answer_all`]);
//! - [`blocking`]: a synchronous producer for threads outside any executor;
//! - [`rdy`] and [`backoff`]: the flow-control rules as pure state machines;
//! - [`lookup`]: asking lookups which brokers have a topic.

pub mod admin;
pub mod backoff;
pub mod blocking;
pub mod clock;
pub mod config;
pub mod conn;
pub mod consumer;
pub mod error;
pub mod handshake;
pub mod lookup;
pub mod message;
pub mod producer;
pub mod rdy;
mod rt;
pub mod tls;
pub mod transport;

pub use config::{ConsumerConfig, Features, Identity, OutputBufferSize, ProducerConfig};
pub use consumer::{answer_all, Consumer, ConsumerStats, Pending};
pub use error::{Error, Result};
pub use handshake::{AuthAnswer, Negotiated};
pub use message::{HandlerResult, Message};
pub use producer::Producer;
pub use protocol::compress::Compression;
pub use protocol::{ErrorCode, MessageId};
pub use tls::TlsConfig;
