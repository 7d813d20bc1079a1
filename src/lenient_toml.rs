//! A TOML value read as Kafka reads `server.properties`: where a number or a boolean is
//! expected, its text is taken too (`"num.partitions" = "3"`,
//! `"auto.create.topics.enable" = "TRUE"`), which is what a `server.properties` file
//! converted line by line gives. Every other shape is TOML's own.
//!
//! Invariants: a value of the expected TOML type reads exactly as `toml::Value` reads it;
//! a string is parsed as Kafka's `ConfigDef.parseType` parses it (surrounding blanks
//! trimmed; booleans `true`/`false` in any case), and one that does not parse is an
//! error naming the text, never a default.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{Error as _, IntoDeserializer, Visitor};
use serde::{forward_to_deserialize_any, Deserializer};
use toml::Value;

/// A `toml::Value` that takes Kafka's text forms of numbers and booleans.
pub struct Lenient(pub Value);

type Error = toml::de::Error;

/// Kafka's boolean text: `true` or `false`, any case, blanks around ignored.
pub fn parse_bool(text: &str) -> Option<bool> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("true") {
        Some(true)
    } else if t.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

fn not_a(kind: &str, text: &str) -> Error {
    Error::custom(format!("{text:?} is not {kind}"))
}

macro_rules! lenient_number {
    ($($method:ident => $visit:ident($ty:ty), $kind:literal;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0 {
                Value::String(text) => visitor.$visit(
                    text.trim().parse::<$ty>().map_err(|_| not_a($kind, &text))?,
                ),
                other => other.$method(visitor),
            }
        }
    )*};
}

impl<'de> Deserializer<'de> for Lenient {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Table(t) => visitor.visit_map(MapDeserializer::new(
                t.into_iter().map(|(k, v)| (k, Lenient(v))),
            )),
            Value::Array(a) => visitor.visit_seq(SeqDeserializer::new(a.into_iter().map(Lenient))),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(text) => {
                visitor.visit_bool(parse_bool(&text).ok_or_else(|| not_a("true or false", &text))?)
            }
            other => other.deserialize_bool(visitor),
        }
    }

    lenient_number! {
        deserialize_i8 => visit_i64(i64), "an integer";
        deserialize_i16 => visit_i64(i64), "an integer";
        deserialize_i32 => visit_i64(i64), "an integer";
        deserialize_i64 => visit_i64(i64), "an integer";
        deserialize_u8 => visit_u64(u64), "a non-negative integer";
        deserialize_u16 => visit_u64(u64), "a non-negative integer";
        deserialize_u32 => visit_u64(u64), "a non-negative integer";
        deserialize_u64 => visit_u64(u64), "a non-negative integer";
        deserialize_f32 => visit_f64(f64), "a number";
        deserialize_f64 => visit_f64(f64), "a number";
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit unit_struct seq tuple tuple_struct map
        identifier ignored_any
    }
}

impl<'de> IntoDeserializer<'de, Error> for Lenient {
    type Deserializer = Lenient;

    fn into_deserializer(self) -> Lenient {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Keys {
        #[serde(alias = "auto.create.topics.enable")]
        auto_create: Option<bool>,
        #[serde(alias = "num.partitions")]
        partitions: Option<i32>,
        bytes: Option<u64>,
        percent: Option<f64>,
        name: Option<String>,
        list: Option<Vec<String>>,
    }

    fn read(text: &str) -> Result<Keys, Error> {
        Keys::deserialize(Lenient(Value::Table(toml::from_str(text).unwrap())))
    }

    #[test]
    fn kafka_text_forms_read_as_the_typed_values() {
        let typed = read(
            "\"auto.create.topics.enable\" = true\n\"num.partitions\" = 3\nbytes = 10\npercent = 2.5\nname = \"x\"\nlist = [\"a\"]\n",
        )
        .unwrap();
        let text = read(
            "\"auto.create.topics.enable\" = \" TRUE \"\n\"num.partitions\" = \"3\"\nbytes = \"10\"\npercent = \"2.5\"\nname = \"x\"\nlist = [\"a\"]\n",
        )
        .unwrap();
        assert_eq!(typed, text);
        assert_eq!(text.auto_create, Some(true));
        assert_eq!(read("percent = \"95\"\n").unwrap().percent, Some(95.0));
    }

    #[test]
    fn text_that_does_not_parse_is_an_error_naming_it() {
        for (doc, want) in [
            (
                "\"auto.create.topics.enable\" = \"yes\"",
                "\"yes\" is not true or false",
            ),
            (
                "\"num.partitions\" = \"three\"",
                "\"three\" is not an integer",
            ),
            ("bytes = \"-1\"", "\"-1\" is not a non-negative integer"),
            ("\"num.partitions\" = \"99999999999\"", "99999999999"),
        ] {
            let e = read(doc).unwrap_err().to_string();
            assert!(e.contains(want), "{doc}: {e}");
        }
        assert!(read("nope = 1").is_err(), "unknown keys are still refused");
        assert!(
            read("name = 3").is_err(),
            "a number is not taken for a string"
        );
    }
}
