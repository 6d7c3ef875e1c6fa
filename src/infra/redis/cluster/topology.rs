//! Which master owns each slot, as this instance last learnt it: from `CLUSTER SHARDS`, and
//! slot by slot from MOVED replies in between.

use redis::{FromRedisValue, Value};

use super::routes::SLOTS;

/// A node's address, `host:port`, as the cluster names it.
pub(crate) type Addr = String;

pub(crate) struct Topology {
    /// Per slot, the index of its master in `nodes`.
    owners: Vec<Option<u16>>,
    nodes: Vec<Addr>,
}

/// One shard of a `CLUSTER SHARDS` reply: its slot ranges and its online master, if it has
/// one (during a failover it has none until a replica is promoted).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) ranges: Vec<(u16, u16)>,
    pub(crate) master: Option<Addr>,
}

impl Topology {
    pub(crate) fn new() -> Self {
        Self {
            owners: vec![None; usize::from(SLOTS)],
            nodes: Vec::new(),
        }
    }

    pub(crate) fn master_of(&self, slot: u16) -> Option<&Addr> {
        let owner = (*self.owners.get(usize::from(slot))?)?;
        self.nodes.get(usize::from(owner))
    }

    /// Every node that masters at least one slot.
    pub(crate) fn masters(&self) -> Vec<Addr> {
        let mut owning = vec![false; self.nodes.len()];
        for owner in self.owners.iter().flatten() {
            owning[usize::from(*owner)] = true;
        }
        self.nodes
            .iter()
            .zip(owning)
            .filter(|(_, owns)| *owns)
            .map(|(node, _)| node.clone())
            .collect()
    }

    /// `slot` is now mastered by `addr` (a MOVED reply).
    pub(crate) fn set(&mut self, slot: u16, addr: &str) {
        let node = self.node(addr);
        if let Some(owner) = self.owners.get_mut(usize::from(slot)) {
            *owner = Some(node);
        }
    }

    /// Takes in a fresh view of the shards. A shard without an online master keeps its
    /// slots where they were: a request there fails and is retried until one is promoted.
    pub(crate) fn update(&mut self, shards: &[Shard]) {
        for shard in shards {
            let Some(master) = &shard.master else {
                continue;
            };
            let node = self.node(master);
            for &(from, to) in &shard.ranges {
                for slot in from..=to.min(SLOTS - 1) {
                    self.owners[usize::from(slot)] = Some(node);
                }
            }
        }
    }

    fn node(&mut self, addr: &str) -> u16 {
        match self.nodes.iter().position(|node| node == addr) {
            Some(index) => index as u16,
            None => {
                self.nodes.push(addr.to_owned());
                (self.nodes.len() - 1) as u16
            }
        }
    }
}

/// The shards of a `CLUSTER SHARDS` reply (RESP2 arrays of pairs, or RESP3 maps). `asked` is
/// the node that answered, for a node whose address it does not know itself.
pub(crate) fn parse_shards(reply: &Value, asked: &str, tls: bool) -> Vec<Shard> {
    let Value::Array(shards) = reply else {
        return Vec::new();
    };
    let asked_host = asked.rsplit_once(':').map_or(asked, |(host, _)| host);
    shards
        .iter()
        .map(|shard| {
            let slots: Vec<u16> = match field(shard, "slots") {
                Some(Value::Array(bounds)) => bounds
                    .iter()
                    .filter_map(|b| u16::from_redis_value_ref(b).ok())
                    .collect(),
                _ => Vec::new(),
            };
            let ranges = slots
                .chunks(2)
                .filter_map(|c| Some((c[0], *c.get(1)?)))
                .collect();
            let nodes = match field(shard, "nodes") {
                Some(Value::Array(nodes)) => nodes.as_slice(),
                _ => &[],
            };
            let master = nodes.iter().find_map(|node| {
                let online_master = text(field(node, "role")).as_deref() == Some("master")
                    && text(field(node, "health")).as_deref() == Some("online");
                if !online_master {
                    return None;
                }
                let host = text(field(node, "ip"))
                    .or_else(|| text(field(node, "endpoint")))
                    .filter(|host| !host.is_empty() && host != "?")
                    .unwrap_or_else(|| asked_host.to_owned());
                let ports = if tls {
                    ["tls-port", "port"]
                } else {
                    ["port", "tls-port"]
                };
                let port = ports
                    .iter()
                    .find_map(|name| u16::from_redis_value_ref(field(node, name)?).ok())?;
                Some(format!("{host}:{port}"))
            });
            Shard { ranges, master }
        })
        .collect()
}

fn field<'a>(map: &'a Value, name: &str) -> Option<&'a Value> {
    let named = |key: &Value| String::from_redis_value_ref(key).is_ok_and(|key| key == name);
    match map {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| named(k)).map(|(_, v)| v),
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| named(&pair[0]))
            .and_then(|pair| pair.get(1)),
        _ => None,
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(|v| String::from_redis_value_ref(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn node(ip: &str, port: i64, role: &str, health: &str) -> Value {
        Value::Array(vec![
            bulk("ip"),
            bulk(ip),
            bulk("port"),
            Value::Int(port),
            bulk("role"),
            bulk(role),
            bulk("health"),
            bulk(health),
        ])
    }

    #[test]
    fn shards_give_each_slot_its_online_master() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![
                    Value::Int(0),
                    Value::Int(99),
                    Value::Int(200),
                    Value::Int(299),
                ]),
                bulk("nodes"),
                Value::Array(vec![
                    node("10.0.0.1", 7001, "master", "online"),
                    node("10.0.0.4", 7004, "replica", "online"),
                ]),
            ]),
            Value::Array(vec![
                bulk("slots"),
                Value::Array(vec![Value::Int(100), Value::Int(199)]),
                bulk("nodes"),
                Value::Array(vec![node("10.0.0.2", 7002, "master", "failed")]),
            ]),
        ]);
        let shards = parse_shards(&reply, "10.0.0.1:7001", false);
        assert_eq!(shards[0].ranges, vec![(0, 99), (200, 299)]);
        assert_eq!(shards[0].master.as_deref(), Some("10.0.0.1:7001"));
        assert_eq!(shards[1].master, None);

        let mut topology = Topology::new();
        topology.set(150, "10.0.0.3:7003");
        topology.update(&shards);
        assert_eq!(
            topology.master_of(0).map(String::as_str),
            Some("10.0.0.1:7001")
        );
        assert_eq!(
            topology.master_of(250).map(String::as_str),
            Some("10.0.0.1:7001")
        );
        // The failed shard's slots stay where they were known to be.
        assert_eq!(
            topology.master_of(150).map(String::as_str),
            Some("10.0.0.3:7003")
        );
        assert_eq!(topology.master_of(120), None);
        assert_eq!(topology.masters().len(), 2);
    }
}
