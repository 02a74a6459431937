//! [`Doc`]: a JSON/YAML value that keeps the order of object members, so a merged API
//! description differs from its input only where idemgate adds to it.

use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// An ordered JSON/YAML value. Object members keep the order they were read (or inserted)
/// in; YAML mapping keys that are not strings (`200:` in `responses`) are read as their text.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Doc {
    /// `null` (YAML `~`).
    Null,
    /// `true`/`false`.
    Bool(bool),
    /// A negative integer.
    Int(i64),
    /// A non-negative integer.
    UInt(u64),
    /// Any other number.
    Float(f64),
    /// A string.
    String(String),
    /// An array / YAML sequence.
    Array(Vec<Doc>),
    /// An object / YAML mapping, in document order.
    Object(IndexMap<String, Doc>),
}

impl Doc {
    /// An empty object.
    pub fn object() -> Self {
        Self::Object(IndexMap::new())
    }

    /// The members, when an object.
    pub fn as_object(&self) -> Option<&IndexMap<String, Doc>> {
        match self {
            Self::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The members, when an object, for changing.
    pub fn as_object_mut(&mut self) -> Option<&mut IndexMap<String, Doc>> {
        match self {
            Self::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The string, when a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// Member `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Doc> {
        self.as_object().and_then(|m| m.get(name))
    }

    /// Member `name` of an object, inserted as an empty object when absent. `None` when
    /// `self` is not an object.
    pub fn entry_object(&mut self, name: &str) -> Option<&mut Doc> {
        let m = self.as_object_mut()?;
        Some(m.entry(name.to_owned()).or_insert_with(Doc::object))
    }

    /// A part built with utoipa's types, its members in the order utoipa writes them (through
    /// text: a `serde_json::Value` would sort them).
    pub(super) fn of<T: Serialize>(part: &T) -> Self {
        serde_json::to_string(part)
            .and_then(|text| serde_json::from_str(&text))
            .expect("utoipa's types serialize to JSON")
    }
}

impl From<serde_json::Value> for Doc {
    fn from(v: serde_json::Value) -> Self {
        // Every JSON value reads as a `Doc`: the fallback is never taken.
        Doc::deserialize(v).unwrap_or(Doc::Null)
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON or YAML value")
    }
    fn visit_unit<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }
    fn visit_none<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        Doc::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Doc, E> {
        Ok(if v >= 0 {
            Doc::UInt(v as u64)
        } else {
            Doc::Int(v)
        })
    }
    fn visit_u64<E>(self, v: u64) -> Result<Doc, E> {
        Ok(Doc::UInt(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Doc, E> {
        Ok(Doc::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Doc, E> {
        Ok(Doc::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Doc, E> {
        Ok(Doc::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Doc>()? {
            out.push(v);
        }
        Ok(Doc::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut out = IndexMap::new();
        while let Some(Key(k)) = map.next_key::<Key>()? {
            let v = map.next_value::<Doc>()?;
            out.insert(k, v);
        }
        Ok(Doc::Object(out))
    }
}

/// A mapping key: a string, or the text of a number or boolean key.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let expected = &"a string, number or boolean mapping key";
        let text = match Doc::deserialize(d)? {
            Doc::String(s) => s,
            Doc::Bool(b) => b.to_string(),
            Doc::Int(i) => i.to_string(),
            Doc::UInt(u) => u.to_string(),
            Doc::Float(f) => f.to_string(),
            Doc::Null => return Err(de::Error::custom("a mapping key is null")),
            Doc::Array(_) => return Err(de::Error::invalid_type(de::Unexpected::Seq, expected)),
            Doc::Object(_) => return Err(de::Error::invalid_type(de::Unexpected::Map, expected)),
        };
        Ok(Key(text))
    }
}
