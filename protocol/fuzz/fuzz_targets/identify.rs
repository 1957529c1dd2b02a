//! IDENTIFY bodies: `IdentifyRequest::parse`, then `negotiate` under one of a few broker
//! configurations, then the feature-negotiation answer.
//!
//! Input: `[limits selector][JSON body...]`. Checked, beyond "no panic": a parsed request
//! serialises and parses back to itself; accepted settings stay within the broker's limits; the
//! answer is JSON that reads back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::identify::{IdentifyLimits, IdentifyRequest, IdentifyResponse};
use protocol::ErrorCode;

fn limits(sel: u8) -> IdentifyLimits {
    let base = IdentifyLimits {
        tls_available: sel & 1 != 0,
        snappy_available: sel & 2 != 0,
        deflate_available: sel & 4 != 0,
        ..IdentifyLimits::default()
    };
    match (sel >> 3) & 3 {
        0 => base,
        1 => IdentifyLimits {
            default_heartbeat_ms: 1000,
            max_heartbeat_ms: 1000,
            default_output_buffer_size: 64,
            max_output_buffer_size: 64,
            default_output_buffer_timeout_ms: 1,
            min_output_buffer_timeout_ms: 1,
            max_output_buffer_timeout_ms: 1,
            default_msg_timeout_ms: 1000,
            max_msg_timeout_ms: 1000,
            max_deflate_level: 0,
            ..base
        },
        2 => IdentifyLimits {
            max_heartbeat_ms: u64::MAX,
            max_output_buffer_size: u64::MAX,
            max_output_buffer_timeout_ms: u64::MAX,
            max_msg_timeout_ms: u64::MAX,
            max_deflate_level: u64::MAX,
            ..base
        },
        _ => IdentifyLimits {
            min_output_buffer_timeout_ms: 0,
            max_deflate_level: 9,
            ..base
        },
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let limits = limits(sel);
    let req = match IdentifyRequest::parse(body) {
        Ok(req) => req,
        Err(e) => {
            assert_eq!(e.code, ErrorCode::BadBody);
            assert!(e.fatal);
            return;
        }
    };
    let json = serde_json::to_vec(&req).expect("a request serialises");
    assert_eq!(IdentifyRequest::parse(&json).as_ref(), Ok(&req));

    let n = match req.negotiate(&limits) {
        Ok(n) => n,
        Err(e) => {
            assert!(e.fatal);
            assert!(matches!(
                e.code,
                ErrorCode::BadBody | ErrorCode::IdentifyFailed
            ));
            return;
        }
    };
    if let Some(hb) = n.heartbeat_ms {
        assert!(hb >= 1000 || hb == limits.default_heartbeat_ms, "{n:?}");
        assert!(hb <= limits.max_heartbeat_ms, "{n:?}");
    } else {
        assert_eq!(req.heartbeat_interval, -1);
    }
    assert!(n.output_buffer_size == 1 || n.output_buffer_size <= limits.max_output_buffer_size);
    assert!(n.output_buffer_timeout_ms <= limits.max_output_buffer_timeout_ms);
    assert!(n.msg_timeout_ms <= limits.max_msg_timeout_ms);
    assert!(n.sample_rate <= 99);
    assert!(n.deflate_level <= limits.max_deflate_level);
    assert!(!(n.snappy && n.deflate));
    assert!(!n.tls_v1 || limits.tls_available);
    assert!(!n.snappy || limits.snappy_available);
    assert!(!n.deflate || limits.deflate_available);

    let resp = IdentifyResponse::new(&n, &limits, 2500, sel & 0x80 != 0);
    let text = resp.to_json();
    let back: IdentifyResponse = serde_json::from_slice(&text).expect("the answer is JSON");
    assert_eq!(back, resp);
});
