//! Where a command goes on a cluster: the slot of its keys, any master, or every master; and
//! how a command whose keys live in several slots is split.

use redis::{Arg, Cmd};

/// The number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The slot of `key`: CRC16 of its hash tag (the text between the first `{` and the next
/// `}`, when not empty) or of the whole key.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tag.unwrap_or(key)) % SLOTS
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Route {
    /// The master of this slot.
    Slot(u16),
    /// Any master: the command names no key (PING, INFO, TIME, a keyless script).
    AnyMaster,
    /// Every master, answering with the first's reply: SCRIPT LOAD and SCRIPT FLUSH, so that
    /// an EVALSHA finds its script wherever its keys live.
    AllMasters,
}

/// The command's route, by its first key. This knows where the commands engage sends carry
/// their keys; any other command goes by its first argument, and a wrong guess costs one
/// MOVED redirection, never a wrong answer.
pub(crate) fn route_of(cmd: &Cmd) -> Route {
    let args = args_of(cmd);
    let Some(name) = args.first().map(|name| name.to_ascii_uppercase()) else {
        return Route::AnyMaster;
    };
    let key = |at: usize| {
        args.get(at)
            .map_or(Route::AnyMaster, |key| Route::Slot(slot_of(key)))
    };
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let keys = args
                .get(2)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok());
            match keys {
                Some(keys) if keys > 0 => key(3),
                _ => Route::AnyMaster,
            }
        }
        b"XREAD" | b"XREADGROUP" => args
            .iter()
            .position(|a| a.eq_ignore_ascii_case(b"STREAMS"))
            .map_or(Route::AnyMaster, |at| key(at + 1)),
        b"SCRIPT" => match args.get(1).map(|sub| sub.to_ascii_uppercase()) {
            Some(sub) if sub == b"LOAD" || sub == b"FLUSH" => Route::AllMasters,
            _ => Route::AnyMaster,
        },
        // A subcommand, then the key (or the shard channel).
        b"XGROUP" | b"XINFO" | b"OBJECT" | b"MEMORY" => key(2),
        b"PUBSUB" => match args.get(1).map(|sub| sub.to_ascii_uppercase()) {
            Some(sub) if sub == b"SHARDNUMSUB" => key(2),
            _ => Route::AnyMaster,
        },
        b"PING" | b"ECHO" | b"INFO" | b"TIME" | b"DBSIZE" | b"WAIT" | b"CLUSTER" | b"CLIENT"
        | b"CONFIG" | b"COMMAND" | b"HELLO" | b"SCAN" | b"KEYS" | b"RANDOMKEY" => Route::AnyMaster,
        _ => key(1),
    }
}

/// How the replies of a command split per slot are put back together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join {
    /// MGET: one value per key, in the order of the keys.
    Values,
    /// DEL, UNLINK, EXISTS, TOUCH: the sum of the counts.
    Sum,
}

/// One slot's part of a split command, with the positions of its keys in the whole.
pub(crate) type Part = (Cmd, Vec<usize>);

/// A command whose every argument is a key, split into one command per slot when its keys
/// live in more than one: the parts and how to join their replies. `None` when the command
/// goes to one slot as it is.
pub(crate) fn split_by_slot(cmd: &Cmd) -> Option<(Join, Vec<Part>)> {
    let args = args_of(cmd);
    let name = args.first()?.to_ascii_uppercase();
    let join = match name.as_slice() {
        b"MGET" => Join::Values,
        b"DEL" | b"UNLINK" | b"EXISTS" | b"TOUCH" => Join::Sum,
        _ => return None,
    };
    let keys = &args[1..];
    let first = slot_of(keys.first()?);
    if keys.iter().all(|key| slot_of(key) == first) {
        return None;
    }
    let mut parts: Vec<(u16, Cmd, Vec<usize>)> = Vec::new();
    for (at, key) in keys.iter().enumerate() {
        let slot = slot_of(key);
        let part = match parts.iter_mut().position(|(s, ..)| *s == slot) {
            Some(index) => &mut parts[index],
            None => {
                parts.push((
                    slot,
                    redis::cmd(&String::from_utf8_lossy(&name)),
                    Vec::new(),
                ));
                parts.last_mut().expect("just pushed")
            }
        };
        part.1.arg(*key);
        part.2.push(at);
    }
    Some((
        join,
        parts.into_iter().map(|(_, cmd, at)| (cmd, at)).collect(),
    ))
}

fn args_of(cmd: &Cmd) -> Vec<&[u8]> {
    cmd.args_iter()
        .filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_as_redis_computes_them() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"{likes:3}:count"), slot_of(b"likes:3"));
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        assert_eq!(slot_of(b"123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn commands_go_to_the_slot_of_their_first_key() {
        let slot = |key: &str| Route::Slot(slot_of(key.as_bytes()));
        assert_eq!(route_of(redis::cmd("GET").arg("a")), slot("a"));
        assert_eq!(
            route_of(redis::cmd("EVALSHA").arg("sha").arg(2).arg("k1").arg("k2")),
            slot("k1")
        );
        assert_eq!(
            route_of(redis::cmd("EVALSHA").arg("sha").arg(0)),
            Route::AnyMaster
        );
        let read = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg("g")
            .arg("c")
            .arg("STREAMS")
            .arg("s")
            .arg(">")
            .clone();
        assert_eq!(route_of(&read), slot("s"));
        assert_eq!(
            route_of(redis::cmd("XGROUP").arg("CREATE").arg("s").arg("g")),
            slot("s")
        );
        assert_eq!(
            route_of(redis::cmd("SCRIPT").arg("LOAD").arg("return 1")),
            Route::AllMasters
        );
        assert_eq!(route_of(&redis::cmd("PING")), Route::AnyMaster);
    }

    #[test]
    fn a_multi_key_command_over_several_slots_is_split_per_slot() {
        assert!(split_by_slot(redis::cmd("MGET").arg("{a}1").arg("{a}2")).is_none());
        let (join, parts) =
            split_by_slot(redis::cmd("MGET").arg("{a}1").arg("{b}1").arg("{a}2")).unwrap();
        assert_eq!(join, Join::Values);
        let positions: Vec<Vec<usize>> = parts.iter().map(|(_, at)| at.clone()).collect();
        assert_eq!(positions, vec![vec![0, 2], vec![1]]);
        let (join, _) = split_by_slot(redis::cmd("UNLINK").arg("{a}").arg("{b}")).unwrap();
        assert_eq!(join, Join::Sum);
        assert!(split_by_slot(redis::cmd("SET").arg("{a}").arg("{b}")).is_none());
    }
}
