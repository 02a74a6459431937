//! One route's table as the file writes it ([`RouteTable`]): `[defaults]` or a `[[routes]]`
//! entry, read into an [`idemgate_tower::RoutePolicy`] by
//! [`Policy::with_route_tables`](idemgate_tower::Policy::with_route_tables), an overlay on
//! the defaults. The keys are [`RouteEntry`]'s.

use idemgate_tower::policy::{KeyProblem, RouteEntry};
use serde::{Deserialize, Deserializer, Serialize};

/// One route's settings as written. An unknown key or a value of the wrong type fails the
/// parse; values are checked when the policy is built ([`super::Config::validate`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RouteTable(pub toml::Table);

impl RouteTable {
    /// A `[[routes]]` entry for `template` (e.g. `POST /payments`), every other key
    /// inherited.
    pub fn route(template: &str) -> Self {
        Self::default().with("route", template)
    }

    /// `self` with `key` set to `value` (`"10s"`, `true`, `400`, ...).
    pub fn with(mut self, key: &str, value: impl Into<toml::Value>) -> Self {
        self.set(key, value);
        self
    }

    /// Sets `key` to `value`.
    pub fn set(&mut self, key: &str, value: impl Into<toml::Value>) {
        self.0.insert(key.to_owned(), value.into());
    }

    /// The table read alone (over the built-in defaults), with `principal` spelled out.
    fn entry(&self) -> Option<RouteEntry> {
        let mut entry: RouteEntry = toml::Value::Table(self.0.clone()).try_into().ok()?;
        let spelled = entry.principal.take();
        entry.principal = spelled.filter(|p| p != "authorization");
        Some(entry)
    }
}

impl PartialEq for RouteTable {
    /// Equal when both read as the same settings: a key left out equals its default
    /// spelled out.
    fn eq(&self, other: &Self) -> bool {
        match (self.entry(), other.entry()) {
            (Some(a), Some(b)) => a == b,
            _ => self.0 == other.0,
        }
    }
}

impl<'de> Deserialize<'de> for RouteTable {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(d)?;
        for (key, problem) in RouteEntry::key_problems(&table) {
            match problem {
                KeyProblem::Unknown => {
                    return Err(serde::de::Error::custom(format!("unknown field `{key}`")))
                }
                KeyProblem::Type(m) => return Err(serde::de::Error::custom(format!("{key}: {m}"))),
                _ => {}
            }
        }
        Ok(Self(table))
    }
}
