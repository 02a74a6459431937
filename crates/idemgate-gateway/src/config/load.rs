//! Reading the file so that one run reports every problem: each key is tried alone against
//! the real types (so no list of names can drift from them), and a key that is unknown or
//! has the wrong type is reported by its path and left at its default, so the rest of the
//! file is still parsed and validated.

use serde::de::DeserializeOwned;

use idemgate_key_service::{ClientConfig, KeyServiceConfig};
use idemgate_tower::policy::{KeyProblem, RouteEntry};

use super::{Config, JwtConfig};

impl Config {
    /// Parses TOML text, keeping going past bad keys: returns the configuration with every
    /// unknown or mistyped key left at its default, and one message per such key
    /// (`` `routes[0].key_requird`: unknown key ``, `` `purge_batch`: invalid type: ... ``).
    ///
    /// # Errors
    /// A TOML syntax error (line and column), after which nothing can be read.
    pub fn from_toml_lenient(text: &str) -> anyhow::Result<(Self, Vec<String>)> {
        let mut table: toml::Table = toml::from_str(text)?;
        let mut errs = Vec::new();
        sift::<Config>(&mut table, "", &mut errs, |key, value, errs| {
            match (key, value) {
                ("defaults", toml::Value::Table(t)) => {
                    sift_route(t, "defaults.", errs);
                    true
                }
                ("jwt", toml::Value::Table(t)) => {
                    sift::<JwtConfig>(t, "jwt.", errs, |_, _, _| false);
                    true
                }
                ("key_service", toml::Value::Table(t)) => {
                    sift::<KeyServiceConfig>(t, "key_service.", errs, |key, value, errs| {
                        let at = "key_service.clients";
                        let client = |t: &mut _, at: &str| {
                            sift::<ClientConfig>(t, at, errs, |_, _, _| false)
                        };
                        key == "clients" && tables(value, at, client)
                    });
                    true
                }
                ("routes", value) => tables(value, "routes", |t, at| sift_route(t, at, errs)),
                _ => false,
            }
        });
        let config = toml::Value::Table(table)
            .try_into::<Config>()
            .unwrap_or_else(|e| {
                errs.push(e.message().to_owned());
                Config::default()
            });
        Ok((config, errs))
    }
}

/// Tries each key of `table` alone as a `T`; a key that fails is reported as `{at}{key}` and
/// removed, unless `nested` sifted its value in place (returning true).
fn sift<T: DeserializeOwned>(
    table: &mut toml::Table,
    at: &str,
    errs: &mut Vec<String>,
    mut nested: impl FnMut(&str, &mut toml::Value, &mut Vec<String>) -> bool,
) {
    let keys: Vec<String> = table.keys().cloned().collect();
    for key in keys {
        let mut one = toml::Table::new();
        one.insert(key.clone(), table[&key].clone());
        let Err(e) = one.try_into::<T>() else {
            continue;
        };
        let value = table.get_mut(&key).expect("key listed above");
        if nested(&key, value, errs) {
            continue;
        }
        let unknown = e.message().contains(&format!("unknown field `{key}`"));
        errs.push(if unknown {
            format!("`{at}{key}`: unknown key")
        } else {
            format!("`{at}{key}`: {}", e.message().trim())
        });
        table.remove(&key);
    }
}

/// Runs `sift` on each table of `value`, an array of tables, at `{at}[i].`; false (nothing
/// done) for any other value.
fn tables(value: &mut toml::Value, at: &str, mut sift: impl FnMut(&mut toml::Table, &str)) -> bool {
    let Some(items) = value.as_array_mut() else {
        return false;
    };
    if !items.iter().all(toml::Value::is_table) {
        return false;
    }
    for (i, item) in items.iter_mut().enumerate() {
        if let toml::Value::Table(t) = item {
            sift(t, &format!("{at}[{i}]."));
        }
    }
    true
}

/// Reports and removes the keys of a route table that are unknown or of the wrong type;
/// bad values are left for [`Config::validate`], which names them.
fn sift_route(table: &mut toml::Table, at: &str, errs: &mut Vec<String>) {
    for (key, problem) in RouteEntry::key_problems(table) {
        errs.push(match problem {
            KeyProblem::Unknown => format!("`{at}{key}`: unknown key"),
            KeyProblem::Type(m) => format!("`{at}{key}`: {m}"),
            _ => continue,
        });
        table.remove(&key);
    }
}
