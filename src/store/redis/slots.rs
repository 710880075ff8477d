//! Redis Cluster routing facts, pure: the slot of a key, the slot map from `CLUSTER SLOTS`,
//! and what a redirect reply says. No I/O.

use redis::{ServerErrorKind, Value};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// No master known for a slot.
const NONE: u16 = u16::MAX;

/// The hash slot Redis Cluster assigns to `key`: CRC16 (XMODEM) of the hash tag — the
/// bytes between the first `{` and the next `}`, when not empty — or of the whole key,
/// modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) % SLOTS
}

/// The part of `key` Redis Cluster hashes, when it is not the whole key.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let close = key[open + 1..].iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in the Redis Cluster spec.
pub(crate) fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// A master's address as the cluster announces it.
pub type Node = (String, u16);

/// Which master owns each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMap {
    owners: Box<[u16]>,
    nodes: Vec<Node>,
}

impl Default for SlotMap {
    fn default() -> SlotMap {
        SlotMap { owners: vec![NONE; SLOTS as usize].into_boxed_slice(), nodes: Vec::new() }
    }
}

impl SlotMap {
    /// The master of `slot`, if known.
    pub fn owner(&self, slot: u16) -> Option<&Node> {
        let i = *self.owners.get(usize::from(slot))?;
        self.nodes.get(usize::from(i))
    }

    /// Every master in the map.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// No slot is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// This map with `slot` owned by `node` (what a `MOVED` says).
    pub fn with_owner(&self, slot: u16, node: Node) -> SlotMap {
        let mut map = self.clone();
        let i = map.index_of(node);
        if let Some(owner) = map.owners.get_mut(usize::from(slot)) {
            *owner = i;
        }
        map
    }

    fn index_of(&mut self, node: Node) -> u16 {
        match self.nodes.iter().position(|n| *n == node) {
            Some(i) => i as u16,
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u16
            }
        }
    }

    /// The map from a `CLUSTER SLOTS` reply: `[[start, end, [ip, port, …], replicas…], …]`.
    /// An empty ip means "the node you asked" (`asked_host`). `None` if the reply is not
    /// that shape.
    pub fn from_cluster_slots(reply: &Value, asked_host: &str) -> Option<SlotMap> {
        let Value::Array(ranges) = reply else { return None };
        let mut map = SlotMap::default();
        for range in ranges {
            let Value::Array(fields) = range else { return None };
            let (start, end) = (int(fields.first()?)?, int(fields.get(1)?)?);
            let Value::Array(master) = fields.get(2)? else { return None };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let host = if host.is_empty() { asked_host.to_string() } else { host };
            let port = u16::try_from(int(master.get(1)?)?).ok()?;
            if start > end || end >= i64::from(SLOTS) || start < 0 {
                return None;
            }
            let i = map.index_of((host, port));
            for slot in start..=end {
                map.owners[slot as usize] = i;
            }
        }
        Some(map)
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// A reply that says the command did not run here and where (or when) to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// The slot lives on `node` now: update the map, send there.
    Moved { slot: u16, node: Node },
    /// The slot is migrating: send this one command to `node`, preceded by `ASKING`.
    Ask { node: Node },
    /// A multi-key operation during a migration, or a failover in progress: send again.
    TryAgain,
    /// The node is a replica now: refresh the map, send to the new master.
    ReadOnly,
    /// The node lacks the script: send it with `EVAL`.
    NoScript,
}

impl Redirect {
    /// What `value` redirects, if it is a redirect. `asked_host` fills an empty host.
    pub fn of(value: &Value, asked_host: &str) -> Option<Redirect> {
        let Value::ServerError(e) = value else { return None };
        let node = |addr: &str| -> Option<Node> {
            let (host, port) = addr.rsplit_once(':')?;
            let host = if host.is_empty() { asked_host } else { host };
            Some((host.to_string(), port.parse().ok()?))
        };
        let mut details = e.details().unwrap_or("").split_whitespace();
        match e.kind()? {
            ServerErrorKind::Moved => {
                let slot = details.next()?.parse().ok()?;
                Some(Redirect::Moved { slot, node: node(details.next()?)? })
            }
            ServerErrorKind::Ask => {
                details.next()?;
                Some(Redirect::Ask { node: node(details.next()?)? })
            }
            ServerErrorKind::TryAgain => Some(Redirect::TryAgain),
            ServerErrorKind::ReadOnly => Some(Redirect::ReadOnly),
            ServerErrorKind::NoScript => Some(Redirect::NoScript),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_spec_test_vector() {
        // Redis Cluster spec, appendix A: "123456789" → 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn slots_match_cluster_keyslot_answers() {
        // Each pair is a `CLUSTER KEYSLOT` answer from redis-server 7.0.
        let cases: [(&str, u16); 14] = [
            ("foo", 12182),
            ("bar", 5061),
            ("123456789", 12739),
            ("somekey", 11058),
            ("foo{hash_tag}", 2515),
            ("bar{hash_tag}", 2515),
            ("{user1000}.following", 3443),
            ("foo{}{bar}", 8363),
            ("foo{{bar}}zap", 4015),
            ("foo{bar}{zap}", 5061),
            ("{}", 15257),
            ("", 0),
            ("tg:gs:3:api4:user5:alice", 7141),
            ("x{", 3596),
        ];
        for (key, slot) in cases {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key:?}");
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(start),
            Value::Int(end),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
            Value::Array(vec![bulk("10.0.0.9"), Value::Int(7100), bulk("replica")]),
        ])
    }

    #[test]
    fn cluster_slots_become_a_map_and_moved_updates_one_slot() {
        let reply = Value::Array(vec![range(0, 5460, "10.0.0.1", 7000), range(5461, 16383, "", 7001)]);
        let map = SlotMap::from_cluster_slots(&reply, "seed").expect("valid reply");
        assert_eq!(map.owner(0), Some(&("10.0.0.1".to_string(), 7000)));
        assert_eq!(map.owner(5460), Some(&("10.0.0.1".to_string(), 7000)));
        assert_eq!(map.owner(16383), Some(&("seed".to_string(), 7001)), "empty ip: the node asked");
        assert_eq!(map.nodes().len(), 2, "replicas are not masters");
        let moved = map.with_owner(3, ("10.0.0.3".into(), 7002));
        assert_eq!(moved.owner(3), Some(&("10.0.0.3".to_string(), 7002)));
        assert_eq!(moved.owner(4), map.owner(4));
        assert!(SlotMap::from_cluster_slots(&Value::Array(vec![range(9, 3, "h", 1)]), "s").is_none());
        assert!(SlotMap::from_cluster_slots(&Value::Nil, "s").is_none());
        let partial =
            SlotMap::from_cluster_slots(&Value::Array(vec![range(0, 10, "h", 1)]), "s").expect("ok");
        assert_eq!(partial.owner(11), None);
    }

    fn error(text: &str) -> Value {
        let (code, details) = text.split_once(' ').unwrap_or((text, ""));
        // Parse the way a server reply is parsed, so `kind()` is what redis-rs gives.
        let wire = format!("-{code} {details}\r\n");
        redis::parse_redis_value(wire.as_bytes()).unwrap_or_else(|_| panic!("{text}"))
    }

    #[test]
    fn redirects_say_where_to_send_and_nothing_else_is_one() {
        assert_eq!(
            Redirect::of(&error("MOVED 3999 127.0.0.1:6381"), "h"),
            Some(Redirect::Moved { slot: 3999, node: ("127.0.0.1".into(), 6381) })
        );
        assert_eq!(
            Redirect::of(&error("MOVED 3999 :6381"), "asked"),
            Some(Redirect::Moved { slot: 3999, node: ("asked".into(), 6381) })
        );
        assert_eq!(
            Redirect::of(&error("ASK 3999 10.0.0.2:7002"), "h"),
            Some(Redirect::Ask { node: ("10.0.0.2".into(), 7002) })
        );
        assert_eq!(Redirect::of(&error("TRYAGAIN Multiple keys"), "h"), Some(Redirect::TryAgain));
        assert_eq!(Redirect::of(&error("READONLY You can't write"), "h"), Some(Redirect::ReadOnly));
        assert_eq!(Redirect::of(&error("NOSCRIPT No matching script"), "h"), Some(Redirect::NoScript));
        assert_eq!(Redirect::of(&error("ERR wrong"), "h"), None);
        assert_eq!(Redirect::of(&Value::Int(1), "h"), None);
    }
}
