//! The host part of a `host:port` address, as the programs read the addresses they are given
//! (lookups, brokers, admin-ui's nodes). Never fails: what is not `host:port` is a host.

/// The host of `host:port`, `[v6]:port`, `[v6]` or a bare host.
///
/// Brackets are removed from an IPv6 host. An address with several colons and no brackets is
/// an IPv6 literal without a port (a port needs the brackets, as Go's `net.SplitHostPort`
/// requires), so it is returned whole.
pub fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match addr.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => host,
        _ => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_with_and_without_port() {
        assert_eq!(host_of("127.0.0.1:4150"), "127.0.0.1");
        assert_eq!(host_of("broker.example:4150"), "broker.example");
        assert_eq!(host_of("localhost"), "localhost");
        assert_eq!(host_of("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_of(":4150"), "");
    }

    #[test]
    fn ipv6_with_brackets_and_without() {
        assert_eq!(host_of("[::1]:4160"), "::1");
        assert_eq!(host_of("[fe80::1%eth0]:4161"), "fe80::1%eth0");
        assert_eq!(host_of("[::1]"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("2001:db8::7"), "2001:db8::7");
    }
}
