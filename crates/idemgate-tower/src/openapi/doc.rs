//! [`Doc`]: a JSON/YAML value that keeps the order of object members, so a merged API
//! description differs from its input only where idemgate adds to it.

use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An ordered JSON/YAML value. Object members keep the order they were read (or inserted)
/// in; YAML mapping keys that are not strings (`200:` in `responses`) are read as their text.
#[derive(Debug, Clone, PartialEq)]
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
}

impl Doc {
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
        use serde_json::Value as V;
        match v {
            V::Null => Doc::Null,
            V::Bool(b) => Doc::Bool(b),
            V::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Doc::UInt(u),
                (None, Some(i)) => Doc::Int(i),
                _ => Doc::Float(n.as_f64().unwrap_or(0.0)),
            },
            V::String(s) => Doc::String(s),
            V::Array(a) => Doc::Array(a.into_iter().map(Doc::from).collect()),
            V::Object(m) => Doc::Object(m.into_iter().map(|(k, v)| (k, Doc::from(v))).collect()),
        }
    }
}

impl Serialize for Doc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Doc::Null => s.serialize_unit(),
            Doc::Bool(b) => s.serialize_bool(*b),
            Doc::Int(i) => s.serialize_i64(*i),
            Doc::UInt(u) => s.serialize_u64(*u),
            Doc::Float(f) => s.serialize_f64(*f),
            Doc::String(v) => s.serialize_str(v),
            Doc::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Doc::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
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
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean mapping key")
            }
            fn visit_str<E>(self, v: &str) -> Result<Key, E> {
                Ok(Key(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Key, E> {
                Ok(Key(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
                Ok(Key(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Key, E> {
                Err(E::custom("a mapping key is null"))
            }
        }
        d.deserialize_any(KeyVisitor)
    }
}
