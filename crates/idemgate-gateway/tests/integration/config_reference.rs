//! docs/configuration.md's key tables, generated from the configuration structs so they
//! cannot drift: each key and its meaning from the field and its doc comment (the source,
//! read with `syn`), its default from the struct's `Default` (serialized, as the file spells
//! it). The test fails when the page differs; `UPDATE_DOCS=1 cargo test -p idemgate-gateway
//! --test integration config_reference` rewrites the tables between the page's markers.

mod render;
mod source;

use std::collections::{BTreeMap, BTreeSet};

use idemgate_gateway::config::{Config, JwtConfig};
use idemgate_key_service::{ClientConfig, KeyServiceConfig};
use idemgate_tower::policy::RouteEntry;
use render::{diff, regenerate, render};
use source::{crates_dir, inner, keys, section, type_name, Key};

/// One generated table: its marker name, its struct and that struct's default.
struct Table {
    name: &'static str,
    strukt: &'static str,
    defaults: toml::Table,
}

fn tables() -> Vec<Table> {
    fn ser<T: serde::Serialize>(value: T) -> toml::Table {
        toml::Table::try_from(value).expect("a default serializes as a TOML table")
    }
    vec![
        Table {
            name: "gateway",
            strukt: "Config",
            defaults: ser(Config::default()),
        },
        Table {
            name: "routes",
            strukt: "RouteEntry",
            defaults: ser(RouteEntry::default()),
        },
        Table {
            name: "key_service",
            strukt: "KeyServiceConfig",
            defaults: ser(KeyServiceConfig::default()),
        },
        Table {
            name: "key_service.clients",
            strukt: "ClientConfig",
            defaults: ser(ClientConfig::default()),
        },
        Table {
            name: "jwt",
            strukt: "JwtConfig",
            defaults: ser(JwtConfig::default()),
        },
    ]
}

#[test]
fn the_configuration_reference_is_generated_from_the_structs() {
    let path = crates_dir().join("../docs/configuration.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let mut generated = BTreeMap::new();
    let mut wrong = Vec::new();
    for table in tables() {
        let (md, w) = render(&table);
        generated.insert(table.name, md);
        wrong.extend(w);
    }
    assert!(
        wrong.is_empty(),
        "doc comments that state another default than Default:\n{}",
        wrong.join("\n")
    );
    let want = regenerate(&page, &generated);
    if want == page {
        return;
    }
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    panic!(
        "docs/configuration.md differs from the configuration structs (- page, + generated); \
         run `UPDATE_DOCS=1 cargo test -p idemgate-gateway --test integration config_reference`:\n{}",
        diff(&page, &want)
    );
}

/// Every key of a section, by table: `["listen", ...]` under `""`, `"defaults"` ...
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for (file_path, strukt) in [
        ("", "Config"),
        ("defaults", "RouteEntry"),
        ("routes", "RouteEntry"),
        ("jwt", "JwtConfig"),
        ("key_service", "KeyServiceConfig"),
        ("key_service.clients", "ClientConfig"),
    ] {
        let names = keys(strukt).into_iter().map(|k| k.name).collect();
        out.insert(file_path.to_owned(), names);
    }
    out
}

/// A value of the key's type, for a key whose default is unset.
fn sample(key: &Key) -> toml::Value {
    match type_name(inner(&key.ty).unwrap_or(&key.ty)).as_str() {
        "usize" | "u32" => toml::Value::Integer(1),
        _ => toml::Value::String("x".into()),
    }
}

/// A file setting every documented key of every section (its default, or a sample value
/// where it has none) is read without an unknown key or a type error: the generated tables
/// name no key the file refuses. And every key a default serializes is documented: no
/// accepted key is missing from them.
#[test]
fn the_reference_names_every_key_the_file_accepts() {
    let mut file = toml::Table::new();
    for table in tables() {
        let (mut entries, mut sections) = (toml::Table::new(), BTreeSet::new());
        for key in keys(table.strukt) {
            if let Some(of) = section(&key.ty) {
                sections.insert(key.name.clone());
                assert!(
                    tables().iter().any(|t| t.strukt == of),
                    "{}: section {of} has no generated table",
                    key.name
                );
                continue;
            }
            let value = table.defaults.get(&key.name).cloned();
            entries.insert(key.name.clone(), value.unwrap_or_else(|| sample(&key)));
        }
        for serialized in table.defaults.keys() {
            assert!(
                entries.contains_key(serialized) || sections.contains(serialized),
                "{}: key `{serialized}` is accepted but not documented",
                table.strukt
            );
        }
        match table.name {
            "gateway" => file.extend(entries),
            "routes" => {
                file.insert("defaults".into(), toml::Value::Table(entries.clone()));
                file.insert("routes".into(), toml::Value::Array(vec![entries.into()]));
            }
            "key_service" => drop(file.insert("key_service".into(), entries.into())),
            "key_service.clients" => {
                let ks = file["key_service"].as_table_mut().unwrap();
                ks.insert("clients".into(), toml::Value::Array(vec![entries.into()]));
            }
            name => drop(file.insert(name.into(), entries.into())),
        }
    }
    file["defaults"].as_table_mut().unwrap().remove("route");
    let text = toml::to_string(&file).unwrap();
    // Values are checked later (`Config::validate`): no key is unknown or of another type.
    let (_, errs) = Config::from_toml_lenient(&text).unwrap();
    assert!(errs.is_empty(), "{errs:?} in\n{text}");
    // The keys of docs/gateway.example.toml, its commented-out examples included.
    let example =
        std::fs::read_to_string(crates_dir().join("../docs/gateway.example.toml")).unwrap();
    let uncommented: String = example
        .lines()
        .map(|l| {
            let t = l.trim_start_matches("# ");
            let is_toml = t.starts_with('[')
                || t.split_once(" = ").is_some_and(|(k, _)| {
                    k.trim().chars().all(|c| c.is_ascii_lowercase() || c == '_')
                });
            if is_toml {
                t
            } else {
                ""
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let example: toml::Table = toml::from_str(&uncommented).unwrap();
    let documented = documented();
    let mut missing = Vec::new();
    walk("", &example, &documented, &mut missing);
    assert!(
        missing.is_empty(),
        "keys of docs/gateway.example.toml not in the reference: {missing:?}"
    );
}

/// Pushes each key of `table` (at `at`) that the reference lacks.
fn walk(
    at: &str,
    table: &toml::Table,
    documented: &BTreeMap<String, BTreeSet<String>>,
    missing: &mut Vec<String>,
) {
    for (key, value) in table {
        let path = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        match value {
            toml::Value::Table(t) if documented.contains_key(&path) => {
                walk(&path, t, documented, missing)
            }
            toml::Value::Array(a) if documented.contains_key(&path) => {
                for t in a.iter().filter_map(toml::Value::as_table) {
                    walk(&path, t, documented, missing);
                }
            }
            _ if documented[at].contains(key) => {}
            _ => missing.push(path),
        }
    }
}

/// The defaults the tables show are the file's own spellings: serialized, they read back
/// as the same settings (odd durations and exact statuses too).
#[test]
fn serialized_settings_read_back_as_themselves() {
    use std::time::Duration;

    use idemgate_tower::{RoutePolicy, StatusPattern};

    let mut policy = RoutePolicy::default();
    policy.lease_ttl = Duration::from_millis(250);
    policy.record_ttl = Duration::from_secs(90 * 60);
    policy.release_statuses = vec![StatusPattern::Exact(409), StatusPattern::Class(5)];
    policy.max_decoded_body_bytes = Some(4096);
    for p in [RoutePolicy::default(), policy] {
        let text = toml::to_string(&p).unwrap();
        assert_eq!(toml::from_str::<RoutePolicy>(&text).unwrap(), p, "{text}");
    }
    let text = toml::to_string(&Config::default()).unwrap();
    assert_eq!(
        Config::from_toml(&text).unwrap(),
        Config::default(),
        "{text}"
    );
}
