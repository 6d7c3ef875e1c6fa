//! [`Id64`]: the numeric ids of engage (users, items, remarks, vouchers, orders) as the
//! GraphQL `ID` they are on the wire. An argument declared `Id64` arrives parsed and checked
//! (a positive 64-bit integer, as a string or a number), and a field of type `Id64` is written
//! as the string clients expect; no resolver parses or formats an id by hand.
//!
//! It borrows the built-in `ID`'s registration rather than declaring a scalar of its own,
//! so the schema keeps one `ID` type (string ids such as a job's stay `ID`).

use std::borrow::Cow;

use async_graphql::{
    parser::types::Field, registry::Registry, ContextSelectionSet, InputType, InputValueError,
    InputValueResult, OutputType, Positioned, ServerResult, Value, ID,
};

use crate::infra::ids;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id64(pub i64);

impl Id64 {
    /// Reads an id as clients send it; `None` unless it is a positive integer (the rule of
    /// [`ids::parse`], which tokens and the bench endpoint use too).
    pub fn parse(text: &str) -> Option<Self> {
        ids::parse(text, "id").ok().map(Self)
    }
}

impl From<i64> for Id64 {
    fn from(id: i64) -> Self {
        Self(id)
    }
}

impl InputType for Id64 {
    type RawValueType = i64;

    fn type_name() -> Cow<'static, str> {
        <ID as InputType>::type_name()
    }

    fn create_type_info(registry: &mut Registry) -> String {
        <ID as InputType>::create_type_info(registry)
    }

    fn parse(value: Option<Value>) -> InputValueResult<Self> {
        let id = <ID as InputType>::parse(value).map_err(InputValueError::propagate)?;
        Self::parse(&id).ok_or_else(|| {
            InputValueError::custom(format!("must be a positive integer id, got {:?}", id.0))
        })
    }

    fn to_value(&self) -> Value {
        Value::String(self.0.to_string())
    }

    fn as_raw_value(&self) -> Option<&i64> {
        Some(&self.0)
    }
}

impl OutputType for Id64 {
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
        Ok(Value::String(self.0.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_positive_integers_are_ids() {
        assert_eq!(Id64::parse(" 42 "), Some(Id64(42)));
        for bad in ["0", "-1", "abc", "", "9223372036854775808", "1.5"] {
            assert_eq!(Id64::parse(bad), None, "{bad}");
        }
        let value = <Id64 as InputType>::parse(Some(Value::Number(7.into()))).unwrap();
        assert_eq!(value, Id64(7));
        assert!(<Id64 as InputType>::parse(Some(Value::String("x".into()))).is_err());
    }
}
