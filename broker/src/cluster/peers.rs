//! Which address each shard of this broker dials for each peer broker (no I/O): shard `i` of a
//! broker listens on `--replication-address`'s port + `i` ([`shard_addresses`], registered with
//! the controller as the broker's `addresses`), and shard `i` here talks to shard
//! `i mod n` of a peer with `n` addresses ([`by_shard`]).
//!
//! Invariants: this broker never appears among its own peers; a broker that registered no
//! address is left out (and named, so that the caller can warn); every map has one entry per
//! peer at most.

use replication::controller::BrokerInfo;
use replication::ids::BrokerId;
use std::collections::BTreeMap;

/// `host:port` with shards `0..shards`: `[host:port, host:port+1, ..., host:port+shards-1]`.
/// `Err` names why not (no port, or the last port above 65535).
pub fn shard_addresses(address: &str, shards: usize) -> Result<Vec<String>, String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address:?} has no port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{address:?}: the port is not a number from 1 to 65535"))?;
    let last = u32::from(port) + shards.saturating_sub(1) as u32;
    if last > u32::from(u16::MAX) || shards > usize::from(u16::MAX) {
        return Err(format!(
            "{address:?} with --shards {shards}: shard i listens on the port + i, and {port} + \
             {} = {last} is above 65535; give a lower port or fewer shards",
            shards.saturating_sub(1)
        ));
    }
    Ok((0..shards)
        .map(|i| format!("{host}:{}", u32::from(port) + i as u32))
        .collect())
}

/// For each shard index `0..shards`, every other registered broker (fenced ones included:
/// they may come back) and the address that shard dials for it. Also the brokers with no
/// address, which are left out.
///
/// A fenced broker whose first address another broker registered is left out too: that is a
/// retired id (its data path was wiped and a new id took its address), and dialling it
/// reaches the new broker, whose answer under another id ends the connection; the new broker
/// may meanwhile have taken that dial as this broker's and dropped the good connection for it.
pub fn by_shard(
    brokers: &BTreeMap<BrokerId, BrokerInfo>,
    me: BrokerId,
    shards: usize,
) -> (Vec<BTreeMap<u64, String>>, Vec<u64>) {
    let mut maps = vec![BTreeMap::new(); shards];
    let mut without = Vec::new();
    let taken_by_another = |id: BrokerId, first: &String| {
        brokers
            .iter()
            .any(|(other, b)| *other != id && b.addresses.first() == Some(first))
    };
    for (id, info) in brokers {
        if *id == me {
            continue;
        }
        let n = info.addresses.len();
        if n == 0 {
            without.push(id.0);
            continue;
        }
        if info.fenced && taken_by_another(*id, &info.addresses[0]) {
            continue;
        }
        for (i, map) in maps.iter_mut().enumerate() {
            map.insert(id.0, info.addresses[i % n].clone());
        }
    }
    (maps, without)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(addresses: &[&str], fenced: bool) -> BrokerInfo {
        BrokerInfo {
            incarnation: 1,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            fenced,
        }
    }

    #[test]
    fn one_port_per_shard_and_none_above_65535() {
        assert_eq!(
            shard_addresses("h:4153", 3).unwrap(),
            ["h:4153", "h:4154", "h:4155"]
        );
        assert_eq!(
            shard_addresses("[::1]:7", 2).unwrap(),
            ["[::1]:7", "[::1]:8"]
        );
        assert_eq!(shard_addresses("h:65535", 1).unwrap(), ["h:65535"]);
        assert_eq!(
            shard_addresses("h:65534", 2).unwrap(),
            ["h:65534", "h:65535"]
        );
        let e = shard_addresses("h:65535", 2).unwrap_err();
        assert!(e.contains("--shards 2") && e.contains("65536"), "{e}");
        assert!(shard_addresses("h:65300", 256).is_err());
        assert!(shard_addresses("h", 1).is_err());
    }

    #[test]
    fn each_shard_dials_the_peer_shard_of_its_index_modulo_the_peer_count() {
        let brokers = BTreeMap::from([
            (BrokerId(1), info(&["a:1", "a:2"], false)),
            (BrokerId(2), info(&["me:1", "me:2", "me:3"], false)),
            (BrokerId(3), info(&["c:1", "c:2", "c:3", "c:4"], true)),
            (BrokerId(4), info(&[], false)),
        ]);
        let (maps, without) = by_shard(&brokers, BrokerId(2), 3);
        assert_eq!(without, [4]);
        let want =
            |a: &str, c: &str| BTreeMap::from([(1u64, a.to_string()), (3u64, c.to_string())]);
        assert_eq!(
            maps,
            [want("a:1", "c:1"), want("a:2", "c:2"), want("a:1", "c:3")]
        );
    }

    #[test]
    fn a_retired_id_is_not_dialled_at_the_address_its_successor_took() {
        let brokers = BTreeMap::from([
            (BrokerId(1), info(&["a:1"], true)),
            (BrokerId(2), info(&["me:1"], false)),
            (BrokerId(5), info(&["a:1"], false)),
            // Fenced, alone at its address: it may come back, and is dialled.
            (BrokerId(6), info(&["b:1"], true)),
        ]);
        let (maps, _) = by_shard(&brokers, BrokerId(2), 1);
        let want = BTreeMap::from([(5u64, "a:1".to_string()), (6u64, "b:1".to_string())]);
        assert_eq!(maps, [want]);
    }
}
