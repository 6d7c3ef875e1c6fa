//! Global object ids, the one place that writes and reads them.
//!
//! Every object with an identity answers a globally unique, opaque `id`: the standard,
//! padded base64 (RFC 4648 §4) of `Type:local`, as graphql-relay's `toGlobalId` writes it
//! (`Remark:123` is `UmVtYXJrOjEyMw==`). The local part is the decimal id of items, remarks,
//! users, vouchers and orders, `YYYYMM` for a season and `<topic>/<jobId>` for a job (neither
//! may contain `/`). The type in the id is what lets `Query.node` find any object from its
//! id alone, and what tells apart an item and a user that share a number.
//!
//! A [`NodeId<K>`] is the id of one kind of object: a field of that type writes the global
//! id, and an argument of that type arrives decoded and checked. An argument accepts the
//! kind's global id, or for one release the bare local form clients sent before (deprecated,
//! removed in the next major): a number, or `YYYYMM` for a season. A global id of another
//! type, or anything else, is refused with a message that says what was expected; async-graphql
//! answers it as an argument error (`BAD_USER_INPUT`).
//!
//! Each kind borrows the built-in `ID`'s registration rather than declaring a scalar of its
//! own, so the schema keeps one `ID` type (and a job's per-topic id stays a plain `ID`).

use std::{borrow::Cow, fmt::Debug};

use async_graphql::{
    parser::types::Field, registry::Registry, ContextSelectionSet, InputType, InputValueError,
    InputValueResult, OutputType, Positioned, ServerResult, Value, ID,
};
use base64::{engine::general_purpose::STANDARD, Engine};

use crate::infra::{clock::Month, ids};

/// One kind of object with a global id: the GraphQL type it names and its local id.
pub(crate) trait NodeKind: Send + Sync + 'static {
    /// The GraphQL type, the `Type` of `Type:local`.
    const TYPE: &'static str;
    /// What tells apart the objects of this type.
    type Local: Clone + Debug + PartialEq + Send + Sync + 'static;

    /// Appends the local part of a global id.
    fn write_local(local: &Self::Local, out: &mut String);

    /// The local part of a global id of this type.
    fn read_local(text: &str) -> Option<Self::Local>;

    /// A bare local id, as arguments took them before global ids (deprecated); `None` for
    /// a kind that had no bare form in arguments.
    fn read_bare(text: &str) -> Option<Self::Local>;
}

/// The kinds of objects, named as their GraphQL types.
pub(crate) mod kind {
    use super::{ids, Month, NodeKind};

    macro_rules! numeric_kinds {
        ($($kind:ident),*) => {$(
            /// Identified by a positive 64-bit integer (`infra::ids`).
            pub(crate) struct $kind;

            impl NodeKind for $kind {
                const TYPE: &'static str = stringify!($kind);
                type Local = i64;

                fn write_local(local: &i64, out: &mut String) {
                    // By `itoa`: `core::fmt` cost some 280 instructions an id, and a page
                    // writes one or two per row.
                    out.push_str(itoa::Buffer::new().format(*local));
                }

                fn read_local(text: &str) -> Option<i64> {
                    ids::parse(text, "id").ok()
                }

                fn read_bare(text: &str) -> Option<i64> {
                    Self::read_local(text)
                }
            }
        )*};
    }

    numeric_kinds!(Item, Remark, User, Voucher, Order, Notification);

    /// A season: its month, `YYYYMM`.
    pub(crate) struct Season;

    impl NodeKind for Season {
        const TYPE: &'static str = "Season";
        type Local = Month;

        fn write_local(local: &Month, out: &mut String) {
            out.push_str(itoa::Buffer::new().format(local.id()));
        }

        fn read_local(text: &str) -> Option<Month> {
            Month::parse_id(text.trim())
        }

        fn read_bare(text: &str) -> Option<Month> {
            Self::read_local(text)
        }
    }

    /// A topic of the delay queue: its name.
    pub(crate) struct Topic;

    impl NodeKind for Topic {
        const TYPE: &'static str = "Topic";
        type Local = String;

        fn write_local(local: &String, out: &mut String) {
            out.push_str(local);
        }

        fn read_local(text: &str) -> Option<String> {
            (!text.is_empty()).then(|| text.to_string())
        }

        /// Topic arguments take the name, never a `Topic` id.
        fn read_bare(_text: &str) -> Option<String> {
            None
        }
    }

    /// A board: its key (`a-z 0-9 _ -`).
    pub(crate) struct Board;

    impl NodeKind for Board {
        const TYPE: &'static str = "Board";
        type Local = String;

        fn write_local(local: &String, out: &mut String) {
            out.push_str(local);
        }

        fn read_local(text: &str) -> Option<String> {
            let ok = !text.is_empty()
                && text.len() <= 64
                && text
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
            ok.then(|| text.to_string())
        }

        /// Boards are named by their key in arguments, never by a bare id.
        fn read_bare(_text: &str) -> Option<String> {
            None
        }
    }

    /// A job: its topic and the id it was scheduled with, unique among the topic's pending
    /// jobs only, hence the topic in the global id.
    pub(crate) struct Job;

    /// A job's place: `<topic>/<jobId>`.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct JobKey {
        pub(crate) topic: String,
        pub(crate) id: String,
    }

    impl NodeKind for Job {
        const TYPE: &'static str = "Job";
        type Local = JobKey;

        fn write_local(local: &JobKey, out: &mut String) {
            out.push_str(&local.topic);
            out.push('/');
            out.push_str(&local.id);
        }

        fn read_local(text: &str) -> Option<JobKey> {
            let (topic, id) = text.split_once('/')?;
            (!topic.is_empty() && !id.is_empty() && !id.contains('/')).then(|| JobKey {
                topic: topic.to_string(),
                id: id.to_string(),
            })
        }

        /// The job arguments (`job`, `cancelJob`, `requeueDeadJob`) take the topic and the
        /// per-topic job id apart, never a `Job` id: a job id may be any of
        /// `A-Z a-z 0-9 _ - . :`, so a global id could be one too.
        fn read_bare(_text: &str) -> Option<JobKey> {
            None
        }
    }
}

pub(crate) type ItemId = NodeId<kind::Item>;
pub(crate) type RemarkId = NodeId<kind::Remark>;
pub(crate) type UserId = NodeId<kind::User>;
pub(crate) type VoucherId = NodeId<kind::Voucher>;
pub(crate) type OrderId = NodeId<kind::Order>;
pub(crate) type NotificationId = NodeId<kind::Notification>;
pub(crate) type SeasonId = NodeId<kind::Season>;
pub(crate) type JobNodeId = NodeId<kind::Job>;
pub(crate) type BoardId = NodeId<kind::Board>;
pub(crate) type TopicNodeId = NodeId<kind::Topic>;

/// The id of an object of kind `K`: its local id, written as the global id.
pub(crate) struct NodeId<K: NodeKind>(pub K::Local);

impl<K: NodeKind> NodeId<K> {
    pub(crate) fn new(local: K::Local) -> Self {
        Self(local)
    }

    /// The global id. Pages answer one per row, so `Type:local` is written into one
    /// buffer and encoded from there.
    pub(crate) fn encode(&self) -> String {
        let mut plain = String::with_capacity(K::TYPE.len() + 24);
        plain.push_str(K::TYPE);
        plain.push(':');
        K::write_local(&self.0, &mut plain);
        STANDARD.encode(plain)
    }

    /// Reads an argument: this kind's global id, or its bare local form (deprecated).
    pub(crate) fn read(text: &str) -> Result<Self, String> {
        if let Some((type_name, local)) = decode(text) {
            if type_name == K::TYPE {
                return K::read_local(&local)
                    .map(Self)
                    .ok_or_else(|| format!("expected {}, got a malformed one", a_id_of(K::TYPE)));
            }
            if NODE_TYPES.contains(&type_name.as_str()) {
                return Err(format!(
                    "expected {}, got {}",
                    a_id_of(K::TYPE),
                    a_id_of(&type_name)
                ));
            }
        }
        K::read_bare(text).map(Self).ok_or_else(|| {
            format!(
                "expected {}, got {:?}",
                a_id_of(K::TYPE),
                text.chars().take(80).collect::<String>()
            )
        })
    }
}

impl<K: NodeKind> Clone for NodeId<K> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<K: NodeKind> Debug for NodeId<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{:?}", K::TYPE, self.0)
    }
}

impl<K: NodeKind> PartialEq for NodeId<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

/// The interface `Node` answers every implementor's `id` as an `ID`.
impl<K: NodeKind> From<NodeId<K>> for ID {
    fn from(id: NodeId<K>) -> Self {
        ID(id.encode())
    }
}

/// "a Remark id", "an Item id", "a User id".
fn a_id_of(type_name: &str) -> String {
    let article = match type_name.chars().next() {
        Some('A' | 'E' | 'I' | 'O') => "an",
        _ => "a",
    };
    format!("{article} {type_name} id")
}

/// The types with global ids, as [`AnyNodeId::decode`] reads them.
const NODE_TYPES: &[&str] = &[
    kind::Item::TYPE,
    kind::Remark::TYPE,
    kind::User::TYPE,
    kind::Voucher::TYPE,
    kind::Order::TYPE,
    kind::Season::TYPE,
    kind::Job::TYPE,
    kind::Board::TYPE,
    kind::Topic::TYPE,
    kind::Notification::TYPE,
];

/// `Type` and `local` of a global id, if `text` is the base64 of `Type:local`.
fn decode(text: &str) -> Option<(String, String)> {
    let bytes = STANDARD.decode(text.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (type_name, local) = text.split_once(':')?;
    Some((type_name.to_string(), local.to_string()))
}

/// The id of an object of any kind, as `Query.node` takes it: only global ids, since a
/// bare number names no type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AnyNodeId {
    Item(i64),
    Remark(i64),
    User(i64),
    Voucher(i64),
    Order(i64),
    Season(Month),
    Job(kind::JobKey),
    Board(String),
    Topic(String),
    Notification(i64),
}

impl AnyNodeId {
    /// `None` unless `text` is a well-formed global id of a type with ids.
    pub(crate) fn decode(text: &str) -> Option<Self> {
        fn local<K: NodeKind>(text: &str) -> Option<K::Local> {
            K::read_local(text)
        }
        let (type_name, text) = decode(text)?;
        Some(match type_name.as_str() {
            kind::Item::TYPE => Self::Item(local::<kind::Item>(&text)?),
            kind::Remark::TYPE => Self::Remark(local::<kind::Remark>(&text)?),
            kind::User::TYPE => Self::User(local::<kind::User>(&text)?),
            kind::Voucher::TYPE => Self::Voucher(local::<kind::Voucher>(&text)?),
            kind::Order::TYPE => Self::Order(local::<kind::Order>(&text)?),
            kind::Season::TYPE => Self::Season(local::<kind::Season>(&text)?),
            kind::Job::TYPE => Self::Job(local::<kind::Job>(&text)?),
            kind::Board::TYPE => Self::Board(local::<kind::Board>(&text)?),
            kind::Topic::TYPE => Self::Topic(local::<kind::Topic>(&text)?),
            kind::Notification::TYPE => Self::Notification(local::<kind::Notification>(&text)?),
            _ => return None,
        })
    }
}

impl<K: NodeKind> InputType for NodeId<K> {
    type RawValueType = K::Local;

    fn type_name() -> Cow<'static, str> {
        <ID as InputType>::type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        <ID as InputType>::create_type_info(registry)
    }

    fn parse(value: Option<Value>) -> InputValueResult<Self> {
        let id = <ID as InputType>::parse(value).map_err(InputValueError::propagate)?;
        Self::read(&id).map_err(InputValueError::custom)
    }

    fn to_value(&self) -> Value {
        Value::String(self.encode())
    }

    fn as_raw_value(&self) -> Option<&K::Local> {
        Some(&self.0)
    }
}

impl<K: NodeKind> OutputType for NodeId<K> {
    fn type_name() -> Cow<'static, str> {
        <ID as OutputType>::type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        <ID as OutputType>::create_type_info(registry)
    }

    async fn resolve(
        &self,
        _ctx: &ContextSelectionSet<'_>,
        _field: &Positioned<Field>,
    ) -> ServerResult<Value> {
        Ok(Value::String(self.encode()))
    }
}

#[cfg(test)]
mod tests {
    use super::{kind::JobKey, *};

    #[test]
    fn global_ids_are_relays_base64_of_type_and_local_id() {
        assert_eq!(RemarkId::new(123).encode(), "UmVtYXJrOjEyMw==");
        assert_ne!(ItemId::new(7).encode(), UserId::new(7).encode());
        let job = JobNodeId::new(JobKey {
            topic: "mail".into(),
            id: "a:1".into(),
        });
        assert_eq!(job.encode(), STANDARD.encode("Job:mail/a:1"));
        assert_eq!(
            AnyNodeId::decode(&job.encode()),
            Some(AnyNodeId::Job(job.0.clone()))
        );
        let season = SeasonId::new(Month {
            year: 2026,
            month: 11,
        });
        assert_eq!(season.encode(), STANDARD.encode("Season:202611"));
        assert_eq!(SeasonId::read("202611"), Ok(season));
    }

    #[test]
    fn an_argument_takes_its_kinds_global_id_or_the_bare_local_one() {
        assert_eq!(RemarkId::read("UmVtYXJrOjEyMw=="), Ok(RemarkId::new(123)));
        assert_eq!(RemarkId::read(" 42 "), Ok(RemarkId::new(42)));
        let user = UserId::new(123).encode();
        assert_eq!(
            RemarkId::read(&user),
            Err("expected a Remark id, got a User id".to_string())
        );
        assert_eq!(
            OrderId::read(&RemarkId::new(1).encode()),
            Err("expected an Order id, got a Remark id".to_string())
        );
        for bad in ["0", "-1", "abc", "", "9223372036854775808", "1.5"] {
            assert!(RemarkId::read(bad).is_err(), "{bad}");
        }
        assert!(RemarkId::read(&STANDARD.encode("Remark:x")).is_err());
        assert!(JobNodeId::read("job-1").is_err());
        let value = <RemarkId as InputType>::parse(Some(Value::Number(7.into()))).unwrap();
        assert_eq!(value, RemarkId::new(7));
    }

    #[test]
    fn node_takes_only_well_formed_global_ids() {
        assert_eq!(
            AnyNodeId::decode(&ItemId::new(9).encode()),
            Some(AnyNodeId::Item(9))
        );
        for bad in [
            "9",
            "garbage",
            &STANDARD.encode("Nope:1"),
            &STANDARD.encode("Job:x"),
        ] {
            assert_eq!(AnyNodeId::decode(bad), None, "{bad}");
        }
    }
}
