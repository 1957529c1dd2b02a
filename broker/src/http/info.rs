//! `GET /ping`, `GET /info` and `GET|PUT /config/:opt`.
//!
//! `/ping` asks every shard for its health: one shard that cannot write its segments makes
//! the whole broker answer `500 NOK - <reason>`, as nsqd does after a failed disk write.
//! `/config` reads options by nsqd's names (flag names with `_`, durations in nanoseconds;
//! strings as bare text, everything else as JSON, as nsqd answers) and changes the two nsqd
//! lets change at run time, on every shard.

use super::api_error::ApiError;
use super::ask;
use super::routes::Handled;
use crate::admin_ops::{AdminOp, AdminResult, OptionChange};
use crate::shard::Shard;
use http1::{Request, Response};
use serde::Serialize;
use serde_json::{json, Value};
use std::rc::Rc;
use std::time::Duration;

pub async fn ping(shard: &Rc<Shard>) -> Handled {
    Ok(match health(shard).await {
        None => Response::text(200, "OK").into(),
        Some(reason) => Response::text(500, format!("NOK - {reason}")).into(),
    })
}

/// The first unhealthy shard's reason, or `None` when all are healthy.
pub async fn health(shard: &Rc<Shard>) -> Option<String> {
    ask::every_shard(shard, || AdminOp::Health)
        .await
        .into_iter()
        .find_map(|r| match r {
            AdminResult::Health(h) => h,
            _ => None,
        })
}

#[derive(Serialize)]
struct Info<'a> {
    version: &'static str,
    broadcast_address: &'a str,
    hostname: String,
    http_port: i32,
    tcp_port: i32,
    start_time: i64,
    max_heartbeat_interval: u64,
    max_output_buffer_size: u64,
    max_output_buffer_timeout: u64,
    max_deflate_level: u64,
}

pub fn info(shard: &Rc<Shard>) -> Handled {
    let c = &shard.config;
    // The ports the broker listens on, as nsqd's `RealTCPAddr` / `RealHTTPAddr` (the
    // broadcast ports are what lookups hear, and `/config` shows them).
    let info = Info {
        version: protocol::NSQD_COMPAT_VERSION,
        broadcast_address: &c.broadcast_address,
        hostname: nsq_common::hostname(),
        // -1 for a unix socket, as nsqd.
        http_port: c.http_address.info_port(),
        tcp_port: c.tcp_address.info_port(),
        start_time: crate::stats::start_unix(),
        max_heartbeat_interval: nanos(c.max_heartbeat_interval),
        max_output_buffer_size: c.max_output_buffer_size,
        max_output_buffer_timeout: nanos(c.max_output_buffer_timeout),
        max_deflate_level: c.max_deflate_level,
    };
    json_answer(&info)
}

fn json_answer<T: Serialize>(v: &T) -> Handled {
    match serde_json::to_vec(v) {
        Ok(body) => Ok(Response::json(200, body).nsq_v1().into()),
        Err(_) => Err(ApiError::InternalError),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// nsqd's log levels as its `/config/log_level` reports them (a number).
fn log_level_number(level: &str) -> Option<u8> {
    Some(match level.to_ascii_lowercase().as_str() {
        "debug" | "trace" => 1,
        "info" => 2,
        "warn" => 3,
        "error" => 4,
        "fatal" => 5,
        _ => return None,
    })
}

fn or_real(broadcast: u16, real: u16) -> u16 {
    if broadcast != 0 {
        broadcast
    } else {
        real
    }
}

/// The value of option `name` by nsqd's name, as JSON.
fn option_value(shard: &Shard, name: &str) -> Option<Value> {
    let c = &shard.config;
    let d = |d: Duration| json!(nanos(d));
    Some(match name {
        "tcp_address" => json!(c.tcp_address.to_string()),
        "http_address" => json!(c.http_address.to_string()),
        // The address HTTPS is bound to (its real port), "" when it is served nowhere.
        "https_address" => json!(c.https_address.map(|a| a.to_string()).unwrap_or_default()),
        "broadcast_address" => json!(c.broadcast_address),
        // 0 means the listening port, which nsqd writes into the option at start.
        "broadcast_tcp_port" => json!(or_real(c.broadcast_tcp_port, c.tcp_address.port())),
        "broadcast_http_port" => json!(or_real(c.broadcast_http_port, c.http_address.port())),
        "nsqlookupd_tcp_addresses" => json!(shard.lookupd_tcp_addresses()),
        "data_path" => json!(c.data_path.display().to_string()),
        "mem_queue_size" => json!(c.mem_queue_size),
        "max_bytes_per_file" => json!(c.max_bytes_per_file),
        "sync_every" => json!(c.sync_every),
        "sync_timeout" => d(c.sync_timeout),
        "msg_timeout" => d(c.msg_timeout),
        "max_msg_timeout" => d(c.max_msg_timeout),
        "max_msg_size" => json!(c.max_msg_size),
        "max_req_timeout" => d(c.max_req_timeout),
        "max_body_size" => json!(c.max_body_size),
        "max_channel_consumers" => json!(c.max_channel_consumers),
        "max_rdy_count" => json!(c.max_rdy_count),
        "max_heartbeat_interval" => d(c.max_heartbeat_interval),
        "max_output_buffer_size" => json!(c.max_output_buffer_size),
        "max_output_buffer_timeout" => d(c.max_output_buffer_timeout),
        "min_output_buffer_timeout" => d(c.min_output_buffer_timeout),
        "output_buffer_timeout" => d(c.output_buffer_timeout),
        "max_deflate_level" => json!(c.max_deflate_level),
        "e2e_processing_latency_percentiles" => json!(c.e2e_processing_latency_percentiles),
        "e2e_processing_latency_window_time" => d(c.e2e_processing_latency_window_time),
        "log_level" => json!(log_level_number(&shard.log_level()).unwrap_or(2)),
        "shards" => json!(c.shards),
        "retention_time" => d(c.retention_time),
        "retention_bytes" => json!(c.retention_bytes),
        "max_attempts" => json!(c.max_attempts),
        "id" => json!(c.node_id),
        // nsqd's numbers: TLSNotRequired 0, TLSRequiredExceptHTTP 1, TLSRequired 2.
        "tls_required" => json!(match c.tls_required {
            crate::tls::TlsRequired::No => 0,
            crate::tls::TlsRequired::ExceptHttp => 1,
            crate::tls::TlsRequired::Yes => 2,
        }),
        // Go's tls.VersionTLS12 / VersionTLS13 (rustls offers nothing older than 1.2).
        "tls_min_version" => json!(match c.tls.as_ref().map(|t| t.min_version) {
            Some(crate::tls::TlsMinVersion::Tls13) => 0x0304,
            _ => 0x0303,
        }),
        "deflate" => json!(c.deflate),
        "snappy" => json!(c.snappy),
        _ => return given_value(&c.given, name),
    })
}

/// The options that are read as given (nsqd reports every option it has a flag for, in its
/// types: durations in nanoseconds, `tls_required` and `tls_min_version` as its numbers).
fn given_value(g: &crate::config::Args, name: &str) -> Option<Value> {
    let d = |d: Duration| json!(nanos(d));
    Some(match name {
        "log_prefix" => json!(g.log_prefix),
        "auth_http_addresses" => json!(g.auth_http_addresses),
        "auth_http_request_method" => json!(g.auth_http_request_method),
        "http_client_connect_timeout" => d(g.http_client_connect_timeout),
        "http_client_request_timeout" => d(g.http_client_request_timeout),
        "topology_region" => json!(g.topology_region),
        "topology_zone" => json!(g.topology_zone),
        "queue_scan_selection_count" => json!(g.queue_scan_selection_count),
        "queue_scan_worker_pool_max" => json!(g.queue_scan_worker_pool_max),
        "statsd_address" => json!(g.statsd_address),
        "statsd_prefix" => json!(g.statsd_prefix),
        "statsd_interval" => d(g.statsd_interval),
        "statsd_mem_stats" => json!(g.statsd_mem_stats),
        "statsd_udp_packet_size" => json!(g.statsd_udp_packet_size),
        "statsd_exclude_ephemeral" => json!(g.statsd_exclude_ephemeral),
        "tls_cert" => json!(g.tls_cert),
        "tls_key" => json!(g.tls_key),
        "tls_client_auth_policy" => json!(g.tls_client_auth_policy),
        "tls_root_ca_file" => json!(g.tls_root_ca_file),
        "enable_experiment" => json!(g.enable_experiments),
        _ => return None,
    })
}

pub async fn config(shard: &Rc<Shard>, req: &Request) -> Handled {
    let opt = req.head.path().trim_start_matches("/config/");
    if req.head.method() == "PUT" {
        let body = &req.body;
        if body.is_empty() || body.len() as u64 > shard.config.max_msg_size {
            return Err(ApiError::InvalidValueSize);
        }
        let change = match opt {
            // `null` empties the list, as it does nsqd's.
            "nsqlookupd_tcp_addresses" => match serde_json::from_slice::<Option<Vec<String>>>(body)
            {
                Ok(a) => OptionChange::LookupdTcpAddresses(a.unwrap_or_default()),
                Err(_) => return Err(ApiError::InvalidValue),
            },
            "log_level" => {
                let level = String::from_utf8_lossy(body).to_ascii_lowercase();
                // nsqd's five levels only (the command line also takes `trace`).
                if level == "trace" || log_level_number(&level).is_none() {
                    return Err(ApiError::InvalidValue);
                }
                OptionChange::LogLevel(level)
            }
            _ => return Err(ApiError::InvalidOption),
        };
        ask::every_shard(shard, || AdminOp::SetOption(change.clone())).await;
    }
    match option_value(shard, opt) {
        Some(v) => option_answer(v),
        None => Err(ApiError::InvalidOption),
    }
}

/// An option's value as nsqd's V1 API answers it: a string as its bare text (`text/plain`, or
/// no body and no `Content-Type` when empty), anything else as JSON.
fn option_answer(v: Value) -> Handled {
    match v {
        Value::String(s) if s.is_empty() => Ok(Response::empty(200).nsq_v1().into()),
        Value::String(s) => Ok(Response::text(200, s).nsq_v1().into()),
        v => json_answer(&v),
    }
}
