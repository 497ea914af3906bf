//! JSON input read strictly: an object that names a key twice is refused.
//!
//! serde_json keeps the last of two equal keys (and a struct's derive refuses a repeated field
//! only at the top of its own fields), so `{"attempt": 1, "attempt": 2}` would silently be
//! attempt 2. Every JSON document manifestdb reads from a caller (the server's request bodies,
//! the command-line tool's `--from` files and `batch` lines) goes through [`parse`], which reads
//! it into a [`Value`] that refuses a repeated key at any depth, then into the wanted type.

use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as one JSON document of type `T`, refusing an object with a repeated key (at
/// any depth) as well as anything `serde_json` refuses.
///
/// # Errors
/// The `serde_json` error, with its line and column for a syntax error or a repeated key.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let Strict(value) = serde_json::from_slice(bytes)?;
    serde_json::from_value(value)
}

/// A JSON value whose objects hold each key once.
struct Strict(Value);

impl<'de> de::Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Strict, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!("the key {key:?} appears twice in one object")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::parse;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth() {
        for doc in [r#"{"a": 1, "a": 2}"#, r#"{"a": {"b": 1, "c": 2, "b": 1}}"#, r#"[{"x": [], "x": []}]"#] {
            let err = parse::<Value>(doc.as_bytes()).unwrap_err();
            assert!(err.to_string().contains("appears twice"), "{doc}: {err}");
        }
        assert_eq!(
            parse::<Value>(br#"{"a": 1, "b": {"a": 2}, "c": [1, -2, 2.5, null, true, "s"]}"#).unwrap(),
            json!({"a": 1, "b": {"a": 2}, "c": [1, -2, 2.5, null, true, "s"]})
        );
        assert!(parse::<Value>(b"{\"a\": ").is_err());
        assert!(parse::<Value>(b"{} {}").is_err(), "one document only");
    }

    #[test]
    fn the_wanted_type_is_read_from_the_checked_value() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        #[serde(deny_unknown_fields)]
        struct Key {
            attempt: u32,
        }
        assert_eq!(parse::<Key>(br#"{"attempt": 2}"#).unwrap(), Key { attempt: 2 });
        assert!(parse::<Key>(br#"{"attempt": 1, "attempt": 2}"#).is_err());
        assert!(parse::<Key>(br#"{"attempt": 1, "other": 2}"#).unwrap_err().to_string().contains("unknown field"));
        // Integers keep their full range.
        assert_eq!(parse::<u64>(b"18446744073709551615").unwrap(), u64::MAX);
        assert_eq!(parse::<i64>(b"-9223372036854775808").unwrap(), i64::MIN);
    }
}
