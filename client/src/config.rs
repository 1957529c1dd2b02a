//! Settings for producers and consumers, with defaults that work out of the box (the guide:
//! "sane defaults ... minimize the number of dials").
//!
//! Both configs are plain structs with public fields and builder-style setters; `validate`
//! refuses values the broker would refuse, so mistakes show up at construction rather than as
//! a fatal error on the wire.

use crate::error::{Error, Result};
use crate::tls::TlsConfig;
use protocol::compress::Compression;
use protocol::identify::IdentifyRequest;
use protocol::names::{is_valid_channel_name, is_valid_topic_name};
use std::time::Duration;

/// The `user_agent` sent in IDENTIFY unless set.
pub const DEFAULT_USER_AGENT: &str = concat!("nsq-client-rs/", env!("CARGO_PKG_VERSION"));

/// go-nsq's `output_buffer_size`, sent in IDENTIFY unless set.
pub const DEFAULT_OUTPUT_BUFFER_SIZE: u64 = 16 * 1024;
/// go-nsq's `output_buffer_timeout`, sent in IDENTIFY unless set.
pub const DEFAULT_OUTPUT_BUFFER_TIMEOUT: Duration = Duration::from_millis(250);

/// How a client introduces itself in IDENTIFY; shared by producers and consumers.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    /// Heartbeat interval asked of the broker (1 s ..= the broker's maximum, 60 s by default).
    pub heartbeat_interval: Duration,
    /// Per-message timeout asked of the broker; `None` takes the broker's default.
    pub msg_timeout: Option<Duration>,
    /// Bytes the broker may buffer before writing messages to this client (go-nsq's
    /// `output_buffer_size`, 16 KiB by default; 64 ..= the broker's
    /// `--max-output-buffer-size`).
    pub output_buffer_size: OutputBufferSize,
    /// Longest the broker holds a message in that buffer (go-nsq's `output_buffer_timeout`,
    /// 250 ms; within the broker's `--min/max-output-buffer-timeout`). `None` asks for no
    /// holding at all (IDENTIFY's -1): each message written at once, at some throughput cost.
    pub output_buffer_timeout: Option<Duration>,
}

/// The output buffer size asked of the broker in IDENTIFY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputBufferSize {
    /// The broker's default (IDENTIFY's 0).
    BrokerDefault,
    /// This many bytes (64 ..= the broker's maximum).
    Bytes(u64),
    /// No buffering at all (IDENTIFY's -1; the broker then holds nothing, whatever the
    /// timeout).
    Disabled,
}

impl Default for Identity {
    fn default() -> Self {
        let hostname = local_hostname();
        Identity {
            client_id: hostname.split('.').next().unwrap_or("client").to_string(),
            hostname,
            user_agent: DEFAULT_USER_AGENT.to_string(),
            heartbeat_interval: Duration::from_secs(30),
            msg_timeout: None,
            output_buffer_size: OutputBufferSize::Bytes(DEFAULT_OUTPUT_BUFFER_SIZE),
            output_buffer_timeout: Some(DEFAULT_OUTPUT_BUFFER_TIMEOUT),
        }
    }
}

impl Identity {
    /// The IDENTIFY body, always with `feature_negotiation`.
    pub fn identify_request(&self) -> IdentifyRequest {
        IdentifyRequest {
            client_id: self.client_id.clone(),
            hostname: self.hostname.clone(),
            user_agent: self.user_agent.clone(),
            feature_negotiation: true,
            heartbeat_interval: self.heartbeat_interval.as_millis() as i64,
            msg_timeout: self.msg_timeout.map_or(0, |d| d.as_millis() as i64),
            output_buffer_size: match self.output_buffer_size {
                OutputBufferSize::BrokerDefault => 0,
                OutputBufferSize::Bytes(n) => i64::try_from(n).unwrap_or(i64::MAX),
                OutputBufferSize::Disabled => -1,
            },
            output_buffer_timeout: self
                .output_buffer_timeout
                .map_or(-1, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            ..IdentifyRequest::default()
        }
    }

    fn validate(&self) -> Result<()> {
        if self.heartbeat_interval < Duration::from_secs(1) {
            return Err(Error::InvalidConfig(
                "heartbeat_interval must be at least 1s",
            ));
        }
        if self.msg_timeout.is_some_and(|d| d < Duration::from_secs(1)) {
            return Err(Error::InvalidConfig("msg_timeout must be at least 1s"));
        }
        if matches!(self.output_buffer_size, OutputBufferSize::Bytes(n) if n < 64) {
            return Err(Error::InvalidConfig(
                "output_buffer_size must be at least 64 bytes",
            ));
        }
        // The broker's minimum is 25 ms by default; below 1 ms IDENTIFY would say 0, which
        // asks for the broker's default instead.
        if self
            .output_buffer_timeout
            .is_some_and(|d| d < Duration::from_millis(1))
        {
            return Err(Error::InvalidConfig(
                "output_buffer_timeout must be at least 1ms (None: no buffering)",
            ));
        }
        Ok(())
    }
}

/// TLS, compression and AUTH, negotiated in IDENTIFY; go-nsq's `tls_v1`, `tls_config`,
/// `snappy`, `deflate`, `deflate_level` and `auth_secret`. Shared by producers and consumers.
///
/// A broker that does not turn on TLS when `tls_v1` asked for it fails the connection
/// ([`Error::TlsRefused`]): it never goes on in the clear. A compression the broker does not
/// offer is left off, as go-nsq does. A broker that answers `auth_required` gets
/// `auth_secret` in AUTH; without one the connection fails with [`Error::AuthRequired`].
#[derive(Debug, Clone, PartialEq)]
pub struct Features {
    pub tls_v1: bool,
    pub tls_config: TlsConfig,
    pub snappy: bool,
    pub deflate: bool,
    /// 1 (fastest) ..= 9 (smallest); the broker caps it at its `--max-deflate-level`.
    pub deflate_level: u32,
    pub auth_secret: Option<String>,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            tls_v1: false,
            tls_config: TlsConfig::default(),
            snappy: false,
            deflate: false,
            deflate_level: 6,
            auth_secret: None,
        }
    }
}

impl Features {
    /// Sets the IDENTIFY fields that ask for these features.
    pub fn apply(&self, req: &mut IdentifyRequest) {
        req.tls_v1 = self.tls_v1;
        req.snappy = self.snappy;
        req.deflate = self.deflate;
        req.deflate_level = if self.deflate {
            i64::from(self.deflate_level)
        } else {
            0
        };
    }

    /// The compression asked for, if any.
    pub fn compression(&self) -> Option<Compression> {
        if self.snappy {
            Some(Compression::Snappy)
        } else if self.deflate {
            Some(Compression::Deflate {
                level: self.deflate_level,
            })
        } else {
            None
        }
    }

    /// The rustls configuration, when `tls_v1` is on (reads the certificate files).
    pub fn tls_client_config(&self) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>> {
        if self.tls_v1 {
            self.tls_config.client_config().map(Some)
        } else {
            Ok(None)
        }
    }

    fn validate(&self) -> Result<()> {
        if self.snappy && self.deflate {
            return Err(Error::InvalidConfig(
                "snappy and deflate cannot both be on (the broker refuses it)",
            ));
        }
        if !(1..=9).contains(&self.deflate_level) {
            return Err(Error::InvalidConfig("deflate_level must be in 1..=9"));
        }
        if self.auth_secret.as_deref() == Some("") {
            return Err(Error::InvalidConfig("auth_secret must not be empty"));
        }
        Ok(())
    }
}

fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_string())
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident : $ty:ty),* $(,)?) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, value: $ty) -> Self {
                self.$name = value;
                self
            }
        )*
    };
}

macro_rules! identity_setters {
    () => {
        /// `client_id` sent in IDENTIFY (shown by the broker's stats).
        pub fn client_id(mut self, value: impl Into<String>) -> Self {
            self.identity.client_id = value.into();
            self
        }
        /// `user_agent` sent in IDENTIFY.
        pub fn user_agent(mut self, value: impl Into<String>) -> Self {
            self.identity.user_agent = value.into();
            self
        }
        /// `hostname` sent in IDENTIFY.
        pub fn hostname(mut self, value: impl Into<String>) -> Self {
            self.identity.hostname = value.into();
            self
        }
        /// Heartbeat interval asked of the broker.
        pub fn heartbeat_interval(mut self, value: std::time::Duration) -> Self {
            self.identity.heartbeat_interval = value;
            self
        }
        /// Per-message timeout asked of the broker.
        pub fn msg_timeout(mut self, value: std::time::Duration) -> Self {
            self.identity.msg_timeout = Some(value);
            self
        }
        /// Output buffer size asked of the broker (go-nsq's `output_buffer_size`).
        pub fn output_buffer_size(mut self, value: crate::config::OutputBufferSize) -> Self {
            self.identity.output_buffer_size = value;
            self
        }
        /// Longest the broker may hold a message before writing it (go-nsq's
        /// `output_buffer_timeout`); `None`: written at once (IDENTIFY's -1).
        pub fn output_buffer_timeout(mut self, value: Option<std::time::Duration>) -> Self {
            self.identity.output_buffer_timeout = value;
            self
        }
        /// Upgrade connections to TLS (go-nsq's `tls_v1`); see [`Features`].
        pub fn tls_v1(mut self, value: bool) -> Self {
            self.features.tls_v1 = value;
            self
        }
        /// How TLS checks the broker and presents this client (go-nsq's `tls_config`).
        pub fn tls_config(mut self, value: crate::tls::TlsConfig) -> Self {
            self.features.tls_config = value;
            self
        }
        /// Ask for snappy compression.
        pub fn snappy(mut self, value: bool) -> Self {
            self.features.snappy = value;
            self
        }
        /// Ask for deflate compression.
        pub fn deflate(mut self, value: bool) -> Self {
            self.features.deflate = value;
            self
        }
        /// Deflate level, 1 ..= 9.
        pub fn deflate_level(mut self, value: u32) -> Self {
            self.features.deflate_level = value;
            self
        }
        /// The secret sent in AUTH when the broker requires it.
        pub fn auth_secret(mut self, value: impl Into<String>) -> Self {
            self.features.auth_secret = Some(value.into());
            self
        }
    };
}

/// Settings of a [`crate::Producer`].
#[derive(Debug, Clone, PartialEq)]
pub struct ProducerConfig {
    pub identity: Identity,
    pub features: Features,
    /// Longest wait for TCP connect plus handshake.
    pub connect_timeout: Duration,
    /// Longest wait for the answer to a PUB, MPUB or DPUB.
    pub response_timeout: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            identity: Identity::default(),
            features: Features::default(),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(10),
        }
    }
}

impl ProducerConfig {
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// Longest wait for TCP connect plus handshake.
        connect_timeout: Duration,
        /// Longest wait for a publish to be acknowledged.
        response_timeout: Duration,
    }
    identity_setters!();

    pub fn validate(&self) -> Result<()> {
        self.identity.validate()?;
        self.features.validate()?;
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::InvalidConfig("timeouts must be positive"));
        }
        Ok(())
    }
}

/// Settings of a [`crate::Consumer`].
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerConfig {
    pub topic: String,
    pub channel: String,
    pub identity: Identity,
    pub features: Features,
    /// Most messages in flight over all connections together.
    pub max_in_flight: u64,
    /// Messages delivered more than this many times go to the give-up callback and are
    /// finished. 0 means no limit.
    pub max_attempts: u16,
    /// REQ delay for a failed message is `requeue_delay * attempts`, capped by
    /// `max_requeue_delay`, unless the handler names one.
    pub requeue_delay: Duration,
    pub max_requeue_delay: Duration,
    /// Backoff after `n` consecutive failures lasts `backoff_multiplier * 2^(n-1)`, capped by
    /// `max_backoff_duration`. A zero multiplier turns backoff off.
    pub backoff_multiplier: Duration,
    pub max_backoff_duration: Duration,
    /// How often to ask the lookups which brokers have the topic.
    pub lookupd_poll_interval: Duration,
    /// Each poll waits an extra random part of the interval, up to this fraction (0.0..=1.0),
    /// so that consumers started together do not poll together.
    pub lookupd_poll_jitter: f64,
    /// When `max_in_flight` is below the number of connections, a connection that received
    /// nothing for this long gives its RDY to another.
    pub low_rdy_idle_timeout: Duration,
    /// First delay before reconnecting to a direct broker address; doubles per failure.
    pub reconnect_delay: Duration,
    pub max_reconnect_delay: Duration,
    /// Longest wait for TCP connect, handshake and SUB.
    pub connect_timeout: Duration,
    /// Longest wait in [`crate::Consumer::stop`] for running handlers.
    pub stop_timeout: Duration,
}

impl ConsumerConfig {
    /// A configuration with defaults for `topic` and `channel`.
    pub fn new(topic: impl Into<String>, channel: impl Into<String>) -> Self {
        ConsumerConfig {
            topic: topic.into(),
            channel: channel.into(),
            identity: Identity::default(),
            features: Features::default(),
            max_in_flight: 1,
            max_attempts: 5,
            requeue_delay: Duration::from_secs(90),
            max_requeue_delay: Duration::from_secs(15 * 60),
            backoff_multiplier: Duration::from_secs(1),
            max_backoff_duration: Duration::from_secs(120),
            lookupd_poll_interval: Duration::from_secs(60),
            lookupd_poll_jitter: 0.3,
            low_rdy_idle_timeout: Duration::from_secs(10),
            reconnect_delay: Duration::from_secs(1),
            max_reconnect_delay: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            stop_timeout: Duration::from_secs(30),
        }
    }

    /// The topic to subscribe to.
    pub fn topic(mut self, value: impl Into<String>) -> Self {
        self.topic = value.into();
        self
    }

    /// The channel to subscribe on.
    pub fn channel(mut self, value: impl Into<String>) -> Self {
        self.channel = value.into();
        self
    }

    setters! {
        /// Most messages in flight over all connections together.
        max_in_flight: u64,
        /// Deliveries after which a message is given up (0: never).
        max_attempts: u16,
        /// Base of the REQ delay (multiplied by the attempt count).
        requeue_delay: Duration,
        /// Cap of the computed REQ delay.
        max_requeue_delay: Duration,
        /// Base of the backoff duration (zero turns backoff off).
        backoff_multiplier: Duration,
        /// Cap of the backoff duration.
        max_backoff_duration: Duration,
        /// How often to poll the lookups.
        lookupd_poll_interval: Duration,
        /// Random extra part of each poll interval, as a fraction.
        lookupd_poll_jitter: f64,
        /// Idle time after which a low-RDY connection gives its RDY to another.
        low_rdy_idle_timeout: Duration,
        /// First reconnection delay for direct broker addresses.
        reconnect_delay: Duration,
        /// Cap of the reconnection delay.
        max_reconnect_delay: Duration,
        /// Longest wait for connect, handshake and SUB.
        connect_timeout: Duration,
        /// Longest wait for running handlers in `stop`.
        stop_timeout: Duration,
    }
    identity_setters!();

    pub fn validate(&self) -> Result<()> {
        self.identity.validate()?;
        self.features.validate()?;
        if !is_valid_topic_name(&self.topic) {
            return Err(Error::InvalidName {
                what: "topic",
                name: self.topic.clone(),
            });
        }
        if !is_valid_channel_name(&self.channel) {
            return Err(Error::InvalidName {
                what: "channel",
                name: self.channel.clone(),
            });
        }
        if !(0.0..=1.0).contains(&self.lookupd_poll_jitter) {
            return Err(Error::InvalidConfig("lookupd_poll_jitter must be in 0..=1"));
        }
        if self.lookupd_poll_interval.is_zero()
            || self.low_rdy_idle_timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.reconnect_delay.is_zero()
        {
            return Err(Error::InvalidConfig(
                "poll interval, idle timeout, connect timeout and reconnect delay must be positive",
            ));
        }
        Ok(())
    }

    /// The REQ delay for a message that failed on delivery number `attempts`.
    pub fn requeue_delay_for(&self, attempts: u16) -> Duration {
        self.requeue_delay
            .saturating_mul(u32::from(attempts.max(1)))
            .min(self.max_requeue_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_and_validation() {
        let c = ConsumerConfig::new("t", "c")
            .max_in_flight(10)
            .client_id("me")
            .msg_timeout(Duration::from_secs(5));
        assert_eq!(c.max_in_flight, 10);
        assert!(c.validate().is_ok());
        let req = c.identity.identify_request();
        assert!(req.feature_negotiation);
        assert_eq!(req.client_id, "me");
        assert_eq!(req.msg_timeout, 5000);
        assert_eq!(req.heartbeat_interval, 30000);
        assert_eq!(req.output_buffer_size, 16384, "go-nsq's default");
        assert_eq!(req.output_buffer_timeout, 250, "go-nsq's default");
        let off = ConsumerConfig::new("t", "c")
            .output_buffer_timeout(None)
            .output_buffer_size(OutputBufferSize::Disabled)
            .identity
            .identify_request();
        assert_eq!(
            (off.output_buffer_size, off.output_buffer_timeout),
            (-1, -1)
        );
        assert!(ConsumerConfig::new("t", "c")
            .output_buffer_size(OutputBufferSize::Bytes(63))
            .validate()
            .is_err());
        assert!(ConsumerConfig::new("t", "c")
            .output_buffer_timeout(Some(Duration::ZERO))
            .validate()
            .is_err());
        assert!(ConsumerConfig::new("bad topic", "c").validate().is_err());
        assert!(ConsumerConfig::new("t", "").validate().is_err());
        assert!(ConsumerConfig::new("t", "c")
            .lookupd_poll_jitter(2.0)
            .validate()
            .is_err());
        assert!(ProducerConfig::new()
            .heartbeat_interval(Duration::from_millis(10))
            .validate()
            .is_err());
    }

    #[test]
    fn requeue_delay_grows_with_attempts_up_to_cap() {
        let c = ConsumerConfig::new("t", "c")
            .requeue_delay(Duration::from_secs(10))
            .max_requeue_delay(Duration::from_secs(25));
        assert_eq!(c.requeue_delay_for(1), Duration::from_secs(10));
        assert_eq!(c.requeue_delay_for(2), Duration::from_secs(20));
        assert_eq!(c.requeue_delay_for(3), Duration::from_secs(25));
        assert_eq!(c.requeue_delay_for(0), Duration::from_secs(10));
    }
}
