//! The schema's own scalars: [`DateTime`] for every instant, [`Date`] for every calendar day
//! and [`Json`] for every free-form body. Each names its specification (`@specifiedBy`), so
//! that a client's code generator can map it to a type of its language instead of `string`.
//!
//! Instants are written in UTC (`2026-11-27T03:04:05.123Z`, JavaScript's `toISOString`), not
//! in `ENGAGE_TIMEZONE`: a client compares and sorts them as text and parses them with any
//! ISO 8601 parser, and moving the service to another zone changes none of them. The zone
//! still decides which calendar day an instant belongs to (`infra::clock`; for sign-in, the
//! user's zone); a [`Date`] is that day, with no zone written.
//!
//! A value that does not parse is refused during execution with a message naming the scalar,
//! and `api::schema::errors` codes it `BAD_USER_INPUT`, as any other bad argument. Not
//! through `ScalarType::is_valid`, left at its default on purpose: a value it refused would
//! fail validation, `GRAPHQL_VALIDATION_FAILED`, which a client reads as a fault of its
//! document rather than of what its user typed.

use async_graphql::{InputValueError, InputValueResult, Scalar, ScalarType, Value};
use chrono::{NaiveDate, SecondsFormat, Utc};

/// An instant: an RFC 3339 date-time with an offset, answered in UTC with milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DateTime(pub chrono::DateTime<Utc>);

impl DateTime {
    /// An instant kept as epoch milliseconds (the form times take in SQL and Redis).
    pub(crate) fn from_ms(epoch_ms: i64) -> Self {
        Self(chrono::DateTime::from_timestamp_millis(epoch_ms).unwrap_or_default())
    }

    /// Reads an RFC 3339 date-time; an offset (`Z` or `±hh:mm`) is required, the fraction
    /// of a second may have any number of digits.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|at| Self(at.with_timezone(&Utc)))
    }

    /// `2026-11-27T03:04:05.123Z`.
    pub(crate) fn to_text(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

#[Scalar(
    name = "DateTime",
    specified_by_url = "https://scalars.graphql.org/andimarek/date-time.html"
)]
/// An instant, as RFC 3339 text. Answered in UTC with milliseconds and `Z`, e.g.
/// `2026-11-27T03:04:05.123Z` (JavaScript's `Date.prototype.toISOString`). Accepted with an
/// offset, `Z` or `±hh:mm` (`2026-11-27T11:04:05+08:00`), and any fraction of a second; a
/// time without an offset is refused.
impl ScalarType for DateTime {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(text) => Self::parse(text).ok_or_else(|| {
                InputValueError::custom(format!(
                    "{text:?} is not an RFC 3339 date-time with an offset \
                     (e.g. 2026-11-27T03:04:05Z or 2026-11-27T11:04:05+08:00)"
                ))
            }),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(self.to_text())
    }
}

/// A calendar day, `YYYY-MM-DD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Date(pub NaiveDate);

impl Date {
    /// Reads `YYYY-MM-DD`: four digits, two and two, naming a day that exists (chrono alone
    /// would also take `2026-3-1` and `+2026-03-01`).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let shaped = text.len() == 10
            && text.bytes().enumerate().all(|(i, b)| match i {
                4 | 7 => b == b'-',
                _ => b.is_ascii_digit(),
            });
        if !shaped {
            return None;
        }
        NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(Self)
    }
}

#[Scalar(
    name = "Date",
    specified_by_url = "https://scalars.graphql.org/andimarek/local-date.html"
)]
/// A calendar day, `YYYY-MM-DD` (RFC 3339's full-date), with no time and no zone: the days of
/// sign-in are the days of the user's time zone (`User.timeZone`).
impl ScalarType for Date {
    fn parse(value: Value) -> InputValueResult<Self> {
        match &value {
            Value::String(text) => Self::parse(text).ok_or_else(|| {
                InputValueError::custom(format!(
                    "{text:?} is not a calendar day written YYYY-MM-DD"
                ))
            }),
            _ => Err(InputValueError::expected_type(value)),
        }
    }

    fn to_value(&self) -> Value {
        Value::String(self.0.format("%Y-%m-%d").to_string())
    }
}

/// Any JSON value. Kept as a GraphQL value rather than `serde_json::Value`, whose objects
/// would sort their keys: a job's body is answered with its keys in the order it was given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Json(pub Value);

impl Json {
    /// Reads JSON text.
    pub(crate) fn from_text(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text).map(Self)
    }

    /// The value as compact JSON text.
    pub(crate) fn to_text(&self) -> String {
        // Serialising a value read from JSON or GraphQL cannot fail: its keys are strings and
        // its numbers finite.
        serde_json::to_string(&self.0).unwrap_or_default()
    }
}

#[Scalar(
    name = "JSON",
    specified_by_url = "https://www.rfc-editor.org/rfc/rfc8259"
)]
/// Any JSON value (RFC 8259): an object, an array, a string, a number, a boolean or null.
impl ScalarType for Json {
    fn parse(value: Value) -> InputValueResult<Self> {
        Ok(Self(value))
    }

    fn to_value(&self) -> Value {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_answered_in_utc_with_milliseconds() {
        let at = DateTime::parse("2026-11-27T11:04:05.1234+08:00").unwrap();
        assert_eq!(at.to_text(), "2026-11-27T03:04:05.123Z");
        assert_eq!(DateTime::from_ms(0).to_text(), "1970-01-01T00:00:00.000Z");
        for refused in ["2026-11-27T03:04:05", "2026-11-27", "soon", ""] {
            assert_eq!(DateTime::parse(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_date_is_a_real_day_written_in_full() {
        assert_eq!(
            Date::parse("2028-02-29"),
            Some(Date(NaiveDate::from_ymd_opt(2028, 2, 29).unwrap()))
        );
        for refused in [
            "2026-02-30",
            "2026-3-1",
            "+2026-03-01",
            "2026-03-01T00:00:00Z",
        ] {
            assert_eq!(Date::parse(refused), None, "{refused}");
        }
    }

    #[test]
    fn json_keeps_the_order_of_its_keys() {
        let body = Json::from_text(r#"{"z": 1, "a": [true, null, "x"]}"#).unwrap();
        assert_eq!(body.to_text(), r#"{"z":1,"a":[true,null,"x"]}"#);
    }
}
