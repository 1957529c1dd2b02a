//! An IPv4 or IPv6 network (`--allow-config-from-cidr`), read and matched as Go's `net`
//! package does: an IPv4 address and its IPv6-mapped form are the same address.

use std::net::IpAddr;

/// An IPv4 or IPv6 network, `addr/bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

/// `ip` as a 128-bit number, IPv4 mapped into IPv6 as Go's `net.IP` holds it.
fn as_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl Cidr {
    /// Reads `a.b.c.d/n` or `x::y/n`, as Go's `net.ParseCIDR`.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (ip, bits) = s
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR address: {s}"))?;
        let net: IpAddr = ip
            .parse()
            .map_err(|_| format!("invalid CIDR address: {s}"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits: u8 = match bits.parse() {
            Ok(b) if b <= max && !bits.starts_with('+') => b,
            _ => return Err(format!("invalid CIDR address: {s}")),
        };
        Ok(Cidr { net, bits })
    }

    /// Whether `ip` is in the network (an IPv4 address and its IPv6-mapped form alike).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if ip.is_ipv4() != self.net.is_ipv4() {
            return false;
        }
        let width = if self.net.is_ipv4() { 32 } else { 128 };
        let host_bits = u32::from(width - self.bits);
        let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
        as_u128(ip) & mask == as_u128(self.net) & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_as_go() {
        let c = Cidr::parse("127.0.0.1/8").unwrap();
        assert!(c.contains("127.9.9.9".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.2".parse().unwrap()));
        assert!(!c.contains("10.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("192.168.1.1".parse().unwrap()));
        let one = Cidr::parse("10.1.2.3/32").unwrap();
        assert!(one.contains("10.1.2.3".parse().unwrap()));
        assert!(!one.contains("10.1.2.4".parse().unwrap()));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        for bad in ["127.0.0.1", "127.0.0.1/33", "x/8", "::1/129", "1.2.3.4/+8"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }
}
