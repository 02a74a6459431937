//! The tables as markdown: each key's type, default and meaning, and the page's markers.

use std::collections::BTreeMap;

use super::source::{inner, keys, section, type_name};
use super::Table;

/// The type as the file writes it, with the unit the key's name carries.
pub(super) fn kind(key: &str, ty: &syn::Type, default: Option<&toml::Value>) -> String {
    let name = type_name(ty);
    let is_duration = |v: Option<&toml::Value>| {
        v.and_then(toml::Value::as_str)
            .is_some_and(|s| humantime::parse_duration(s).is_ok())
    };
    match name.as_str() {
        "Option" => kind(key, inner(ty).unwrap(), default),
        "Vec" => format!(
            "list of {}",
            match type_name(inner(ty).unwrap()).as_str() {
                "String" => "strings",
                "HeaderName" => "header names",
                "StatusPattern" => "statuses (`NNN` or `Nxx`)",
                other => panic!("{key}: list of {other}"),
            }
        ),
        "bool" => "bool".into(),
        "usize" | "u32" | "u64" if key.ends_with("_bytes") => "integer, bytes".into(),
        "usize" | "u32" | "u64" => "integer".into(),
        "f64" => "number".into(),
        "Duration" => "duration".into(),
        "StatusCode" => "status code".into(),
        "String" if is_duration(default) => "duration".into(),
        "String" if key.ends_with("_file") => "path".into(),
        "String" if key.ends_with("listen") => "address".into(),
        "String" | "LeaseExpiredPolicy" | "InFlightPolicy" | "TrailingSlash" | "EncodedSlash"
        | "StoreResponse" => "string".into(),
        other => panic!("{key}: the generator does not know type {other}"),
    }
}

/// Rustdoc's links as code: `[`text`](path)` and `[`a::B`]` become `` `text` `` and `` `B` ``;
/// a link alone in parentheses (`([`Policy::resolve`])`) or first in them (`([`X`], the
/// default)`) names Rust items the file's readers do not need, and goes.
pub(super) fn unlink(doc: &str) -> String {
    let mut out = String::new();
    let mut rest = doc;
    while let Some(start) = rest.find("[`") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find("`]") else { break };
        let text = &after[..end + 1];
        rest = &after[end + 2..];
        let code = if rest.starts_with('(') {
            rest = &rest[rest.find(')').unwrap() + 1..];
            text.to_owned()
        } else {
            // `a::b::Type::item` → `Type::item`: from the last segment that is a type.
            let segs: Vec<&str> = text.trim_matches('`').split("::").collect();
            let from = segs
                .iter()
                .rposition(|s| s.starts_with(char::is_uppercase))
                .unwrap_or(segs.len() - 1);
            format!("`{}`", segs[from..].join("::"))
        };
        if out.ends_with('(') && rest.starts_with(')') {
            out.pop();
            out.truncate(out.trim_end().len());
            rest = &rest[1..];
        } else if out.ends_with('(') && rest.starts_with(", ") {
            rest = &rest[2..];
        } else {
            out.push_str(&code);
        }
    }
    out.push_str(rest);
    out
}

/// The doc's sentences; a `.` ends one when a capital, a backtick or a bracket follows.
pub(super) fn sentences(doc: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut from = 0;
    for (i, _) in doc.match_indices(". ") {
        let next = doc[i + 2..].chars().next();
        if next.is_some_and(|c| c.is_uppercase() || c == '`' || c == '[') {
            out.push(doc[from..=i].trim());
            from = i + 2;
        }
    }
    out.push(doc[from..].trim());
    out.retain(|s| !s.is_empty());
    out
}

/// A sentence that only states the default (`Default 8.`, `Defaults to none.`, `Default:
/// absent.`): the default column says it, from `Default`.
pub(super) fn states_default(sentence: &str) -> bool {
    sentence.starts_with("Default")
        && (sentence.starts_with("Default:") || !sentence.contains(": "))
}

/// The default as the file writes it, in code.
pub(super) fn shown(default: Option<&toml::Value>) -> String {
    match default {
        None => "unset".into(),
        Some(v) => format!("`{v}`"),
    }
}

/// Whether a doc's "Default X" sentence says the real default (spacing, quotes and
/// backticks aside; `empty`, `none`, `absent` or `any` for an empty or unset value; or the
/// `DEFAULT_*` constant that holds it).
pub(super) fn agrees(sentence: &str, default: Option<&toml::Value>) -> bool {
    let norm = |s: &str| {
        s.to_lowercase()
            .chars()
            .filter(|c| !"`\"[]_, ".contains(*c))
            .collect::<String>()
    };
    let empty = match default {
        None => true,
        Some(toml::Value::String(s)) => s.is_empty(),
        Some(toml::Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    let said = norm(sentence);
    sentence.contains("DEFAULT_")
        || (empty
            && ["empty", "none", "absent", "any"]
                .iter()
                .any(|w| said.contains(w)))
        || default.is_some_and(|v| said.contains(&norm(&v.to_string())))
}

/// The rows of one table, and every "Default X" sentence that says another default.
pub(super) fn render(table: &Table) -> (String, Vec<String>) {
    let mut md = String::from("| key | type | default | meaning |\n|---|---|---|---|\n");
    let mut wrong = Vec::new();
    for key in keys(table.strukt) {
        if section(&key.ty).is_some() {
            continue;
        }
        let default = table.defaults.get(&key.name);
        let mut meaning = Vec::new();
        for sentence in sentences(&key.doc) {
            // A pointer to Rust docs (`See [`Policy::resolve`].`) is not for the file's readers.
            let pointer = sentence.starts_with("See [`") && sentence.ends_with("`].");
            let sentence = unlink(sentence);
            if !states_default(&sentence) && !pointer {
                meaning.push(sentence);
            } else if !pointer && !agrees(&sentence, default) {
                wrong.push(format!(
                    "{}.{}: the doc says \"{sentence}\", Default gives {}",
                    table.strukt,
                    key.name,
                    shown(default)
                ));
            }
        }
        let cell = |s: &str| s.replace('|', "\\|");
        md.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            key.name,
            cell(&kind(&key.name, &key.ty, default)),
            cell(&shown(default)),
            cell(&meaning.join(" "))
        ));
    }
    (md, wrong)
}

pub(super) fn begin(name: &str) -> String {
    format!(
        "<!-- BEGIN GENERATED {name}: from the structs' doc comments and Default; \
         UPDATE_DOCS=1 cargo test -p idemgate-gateway --test integration config_reference -->\n"
    )
}

pub(super) fn end(name: &str) -> String {
    format!("<!-- END GENERATED {name} -->")
}

/// `page` with each table between its markers replaced by the generated one.
pub(super) fn regenerate(page: &str, generated: &BTreeMap<&str, String>) -> String {
    let mut page = page.to_owned();
    for (name, md) in generated {
        let (b, e) = (begin(name), end(name));
        let start = page
            .find(&b)
            .unwrap_or_else(|| panic!("docs/configuration.md lacks the marker {b}"));
        let stop = page[start..]
            .find(&e)
            .unwrap_or_else(|| panic!("docs/configuration.md lacks the marker {e}"))
            + start;
        page.replace_range(start + b.len()..stop, md);
    }
    page
}

/// The lines of `a` and `b` that differ, for the failure message.
pub(super) fn diff(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let mut out = String::new();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i), b.get(i));
        if x != y {
            out.push_str(&format!(
                "line {}:\n- {}\n+ {}\n",
                i + 1,
                x.unwrap_or(&""),
                y.unwrap_or(&"")
            ));
        }
    }
    out
}
