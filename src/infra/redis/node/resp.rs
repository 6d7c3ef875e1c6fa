//! Reads RESP2 replies into the `redis` crate's [`Value`]s, as its own parser would: `+OK`
//! is [`Value::Okay`], a nil bulk string or array is [`Value::Nil`], and an error reply is
//! read by the crate itself (errors are rare, and only it can make a `ServerError`).

use redis::{ErrorKind, RedisError, RedisResult, Value};

/// How deeply arrays may nest, as the crate allows.
const MAX_DEPTH: usize = 100;

/// The reply at the front of `input` and its length in bytes; `None` while it is
/// incomplete.
pub(super) fn read(input: &[u8]) -> RedisResult<Option<(Value, usize)>> {
    let mut at = 0;
    Ok(value(input, &mut at, 0)?.map(|value| (value, at)))
}

fn value(input: &[u8], at: &mut usize, depth: usize) -> RedisResult<Option<Value>> {
    let Some(&kind) = input.get(*at) else {
        return Ok(None);
    };
    let start = *at;
    let Some(line) = line(input, at) else {
        return Ok(None);
    };
    Ok(Some(match kind {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(text(line)?.to_owned()),
        b':' => Value::Int(integer(line)?),
        b'-' => redis::parse_redis_value(&input[start..*at])?,
        b'$' => {
            let Ok(length) = usize::try_from(integer(line)?) else {
                return Ok(Some(Value::Nil));
            };
            let Some(end) = at.checked_add(length).filter(|end| end + 2 <= input.len()) else {
                return Ok(None);
            };
            if &input[end..end + 2] != b"\r\n" {
                return Err(malformed("a bulk string not ended by CRLF"));
            }
            let bytes = input[*at..end].to_vec();
            *at = end + 2;
            Value::BulkString(bytes)
        }
        b'*' => {
            let Ok(length) = usize::try_from(integer(line)?) else {
                return Ok(Some(Value::Nil));
            };
            if depth >= MAX_DEPTH {
                return Err(malformed("arrays nested too deeply"));
            }
            // Each element takes at least three bytes: a length beyond what has come is
            // not allocated before its elements are here.
            let mut items = Vec::with_capacity(length.min((input.len() - *at) / 3));
            for _ in 0..length {
                match value(input, at, depth + 1)? {
                    Some(item) => items.push(item),
                    None => return Ok(None),
                }
            }
            Value::Array(items)
        }
        _ => return Err(malformed("a reply of an unknown type")),
    }))
}

/// The line after the type byte at `at`, without its CRLF; `at` moves past it.
fn line<'a>(input: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let rest = &input[*at + 1..];
    let end = rest.windows(2).position(|pair| pair == b"\r\n")?;
    *at += 1 + end + 2;
    Some(&rest[..end])
}

/// An integer line read from its digits, as `str::parse` reads one (an optional sign, then
/// at least one digit, within `i64`), without first checking the line is UTF-8: every bulk
/// string and array of a reply starts with one.
fn integer(line: &[u8]) -> RedisResult<i64> {
    let not_one = || malformed("an integer that is not one");
    let (negative, digits) = match line {
        [b'-', digits @ ..] => (true, digits),
        [b'+', digits @ ..] => (false, digits),
        digits => (false, digits),
    };
    if digits.is_empty() {
        return Err(not_one());
    }
    digits.iter().try_fold(0i64, |value, &digit| {
        if !digit.is_ascii_digit() {
            return Err(not_one());
        }
        let digit = i64::from(digit - b'0');
        let value = value.checked_mul(10);
        // A negative number is gathered below zero, so that `i64::MIN` fits.
        if negative {
            value.and_then(|value| value.checked_sub(digit))
        } else {
            value.and_then(|value| value.checked_add(digit))
        }
        .ok_or_else(not_one)
    })
}

fn text(line: &[u8]) -> RedisResult<&str> {
    std::str::from_utf8(line).map_err(|_| malformed("a line that is not UTF-8"))
}

fn malformed(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::Parse, what))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reply shape engage reads, as the crate's own parser reads it.
    #[test]
    fn reads_every_reply_as_the_crate_does() {
        let replies: &[&[u8]] = &[
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b":-42\r\n",
            b"$5\r\nhe\r\nl\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n+x\r\n",
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            b"-ERR wrong number of arguments\r\n",
            b"*2\r\n-ERR inside\r\n:1\r\n",
        ];
        for reply in replies {
            let expected = redis::parse_redis_value(reply).unwrap();
            assert_eq!(
                read(reply).unwrap(),
                Some((expected, reply.len())),
                "{}",
                String::from_utf8_lossy(reply)
            );
        }
    }

    #[test]
    fn an_incomplete_reply_waits_for_more_and_the_next_one_is_left() {
        let whole = b"*2\r\n$3\r\nabc\r\n:7\r\n+OK\r\n";
        for cut in 0..17 {
            assert_eq!(read(&whole[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (value, used) = read(whole).unwrap().unwrap();
        assert_eq!(used, 17);
        assert_eq!(
            value,
            Value::Array(vec![Value::BulkString(b"abc".to_vec()), Value::Int(7)])
        );
        assert_eq!(read(&whole[used..]).unwrap(), Some((Value::Okay, 5)));
    }

    #[test]
    fn integers_read_as_str_parse_reads_them() {
        let lines: &[&[u8]] = &[
            b"0",
            b"-0",
            b"+7",
            b"42",
            b"-42",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"",
            b"-",
            b"+",
            b"1-2",
            b" 1",
            b"0x10",
            b"\xff",
        ];
        for line in lines {
            let expected = std::str::from_utf8(line)
                .ok()
                .and_then(|text| text.parse::<i64>().ok());
            assert_eq!(
                integer(line).ok(),
                expected,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn a_lone_cr_is_part_of_its_line() {
        assert_eq!(
            read(b"+a\rb\r\n").unwrap(),
            Some((Value::SimpleString("a\rb".into()), 6))
        );
        assert_eq!(read(b"+a\r").unwrap(), None);
        assert_eq!(read(b"+a\rb\r").unwrap(), None);
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        let bad: &[&[u8]] = &[
            b"?what\r\n",
            b":12x\r\n",
            b"$3\r\nabcd\r\n",
            b"*x\r\n",
            b"$99999999999999999999\r\n",
        ];
        for reply in bad {
            assert!(read(reply).is_err(), "{}", String::from_utf8_lossy(reply));
        }
        let deep = b"*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(read(&deep).is_err());
        // A huge announced length allocates nothing until its elements come.
        assert_eq!(read(b"*9223372036854775807\r\n").unwrap(), None);
        assert_eq!(read(b"$9223372036854775807\r\n").unwrap(), None);
    }
}
