//! The one module that builds Redis keys.
//!
//! Every key is `<prefix>{<hash tag>}:<rest>`. The prefix (`ENGAGE_REDIS_PREFIX`) lets tests
//! and deployments share a server; the hash tag puts the keys one Lua script touches together
//! into one Redis Cluster slot. Lua never builds a key: it receives these in KEYS.
//!
//! Live channels have the same shape: a script publishes on a channel in the slot of its
//! keys. On a cluster it publishes with SPUBLISH, so a like's update travels only within
//! its slot's shard (PUBLISH would copy every message to every node); on one node with
//! PUBLISH, which the hub's plain pub/sub connection receives.
//! Each key family has one function here; features add theirs in their own `impl Keys`
//! block next to their code, built with [`Keys::tagged`] from [`KeyPart`]s.

use chrono::NaiveDate;

use crate::infra::clock::day_number;

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    cluster: bool,
    points_buckets: u32,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            cluster: false,
            points_buckets: 1,
        }
    }

    /// The keys of an instance whose points keys are spread over `buckets` user buckets
    /// (`ENGAGE_POINTS_BUCKETS`, see `features::points`).
    pub fn with_points_buckets(mut self, buckets: u32) -> Self {
        self.points_buckets = buckets.max(1);
        self
    }

    /// How many user buckets the points keys are spread over.
    pub(crate) fn points_buckets(&self) -> u32 {
        self.points_buckets
    }

    /// The keys of an instance on a Redis Cluster (whose live channels are sharded).
    pub fn on_cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// How scripts publish on live channels: `SPUBLISH` on a cluster, `PUBLISH` on one node.
    pub fn publish_command(&self) -> &'static str {
        if self.cluster {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>{<tag>}:<rest>`: the one shape of every key, built in one string. The tag
    /// and the rest are [`KeyPart`]s: strings, integers, or tuples of them, such as
    /// `("sign:", user_id, ':', month.id())`.
    pub(crate) fn tagged(&self, tag: impl KeyPart, rest: impl KeyPart) -> String {
        let mut key = String::with_capacity(self.prefix.len() + 40);
        key.push_str(&self.prefix);
        key.push('{');
        tag.write_to(&mut key);
        key.push_str("}:");
        rest.write_to(&mut key);
        key
    }

    /// The ID generator's sequence counter for one UTC day.
    pub(crate) fn id_sequence(&self, day: NaiveDate) -> String {
        self.tagged("ids", ("seq:", day_number(day)))
    }

    /// The Automatic Persisted Queries: their texts by the SHA-256 of each.
    pub(crate) fn persisted_queries(&self) -> String {
        self.tagged("apq", "documents")
    }

    /// When each persisted query was last used (its eviction order).
    pub(crate) fn persisted_query_recency(&self) -> String {
        self.tagged("apq", "recency")
    }

    /// What the persisted queries count against their byte budget.
    pub(crate) fn persisted_query_bytes(&self) -> String {
        self.tagged("apq", "bytes")
    }

    /// A pattern matching every key of this prefix (tests clean up with it).
    pub fn all_pattern(&self) -> String {
        format!("{}*", self.prefix)
    }
}

/// A piece of a key, written into it without `core::fmt`. A sign-in builds seventeen keys
/// and a like five; formatting them through `Display` cost about 840 instructions a key,
/// 6 % of a sign-in (BENCHMARKS.md, "What each change bought").
pub(crate) trait KeyPart {
    fn write_to(&self, key: &mut String);
}

impl KeyPart for str {
    fn write_to(&self, key: &mut String) {
        key.push_str(self);
    }
}

impl KeyPart for String {
    fn write_to(&self, key: &mut String) {
        key.push_str(self);
    }
}

impl KeyPart for char {
    fn write_to(&self, key: &mut String) {
        key.push(*self);
    }
}

impl<T: KeyPart + ?Sized> KeyPart for &T {
    fn write_to(&self, key: &mut String) {
        (**self).write_to(key);
    }
}

macro_rules! integer_key_parts {
    ($($integer:ty),*) => {$(
        impl KeyPart for $integer {
            fn write_to(&self, key: &mut String) {
                key.push_str(itoa::Buffer::new().format(*self));
            }
        }
    )*};
}

integer_key_parts!(i32, i64, u32, u64, usize);

macro_rules! tuple_key_parts {
    ($(($($part:ident),+)),*) => {$(
        impl<$($part: KeyPart),+> KeyPart for ($($part,)+) {
            #[allow(non_snake_case)]
            fn write_to(&self, key: &mut String) {
                let ($($part,)+) = self;
                $($part.write_to(key);)+
            }
        }
    )*};
}

tuple_key_parts!((A, B), (A, B, C), (A, B, C, D), (A, B, C, D, E));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_write_strings_integers_and_tuples() {
        let keys = Keys::new("p:");
        assert_eq!(keys.tagged("t", ""), "p:{t}:");
        assert_eq!(
            keys.tagged(
                ("sale:", -7i64),
                ("order:", u64::MAX, ':', String::from("x"))
            ),
            "p:{sale:-7}:order:18446744073709551615:x"
        );
        assert_eq!(
            keys.tagged(("a", 0u32), ("b", i64::MIN, ':', 42usize, 'z')),
            "p:{a0}:b-9223372036854775808:42z"
        );
    }

    #[test]
    fn keys_carry_prefix_and_hash_tag() {
        let keys = Keys::new("engage:");
        let day = NaiveDate::from_ymd_opt(2026, 11, 23).unwrap();
        assert_eq!(keys.id_sequence(day), "engage:{ids}:seq:20261123");
        assert_eq!(keys.persisted_queries(), "engage:{apq}:documents");
    }
}
