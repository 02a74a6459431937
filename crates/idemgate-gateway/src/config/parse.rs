//! Parsers of single settings; each pushes a message naming its field on error.

use std::net::SocketAddr;
use std::time::Duration;

pub(super) fn parse_addr(field: &str, value: &str, errs: &mut Vec<String>) -> Option<SocketAddr> {
    value
        .parse()
        .map_err(|_| {
            errs.push(format!(
                "{field}: `{value}` is not an address like 127.0.0.1:8080"
            ))
        })
        .ok()
}

pub(super) fn parse_upstream(value: &str, errs: &mut Vec<String>) -> Option<http::Uri> {
    if value.is_empty() {
        errs.push("upstream: missing; set the API's base URL, e.g. http://127.0.0.1:3000".into());
        return None;
    }
    match value.parse::<http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some() => {
            Some(u)
        }
        _ => {
            errs.push(format!(
                "upstream: `{value}` is not an http://host:port or https://host:port URL"
            ));
            None
        }
    }
}

pub(super) fn duration(field: &str, value: &str, errs: &mut Vec<String>) -> Option<Duration> {
    humantime::parse_duration(value)
        .map_err(|e| {
            errs.push(format!(
                "{field}: `{value}` is not a duration like \"10s\" or \"24h\" ({e})"
            ))
        })
        .ok()
}

/// Parses a setting spelled as its type's configuration names (`"refuse"`, `"as-sent"`,
/// ...); unset (`None`) or wrong gives the default, a wrong one with a message naming
/// `field` and the accepted spellings.
pub(super) fn setting<T>(field: &str, value: Option<&str>, errs: &mut Vec<String>) -> T
where
    T: std::str::FromStr<Err = String> + Default,
{
    value
        .map(|v| v.parse().map_err(|e| errs.push(format!("{field}: {e}"))))
        .and_then(Result::ok)
        .unwrap_or_default()
}

/// Parses a header name, naming `field` on error.
pub(super) fn header_name(
    field: &str,
    value: &str,
    errs: &mut Vec<String>,
) -> Option<http::HeaderName> {
    http::HeaderName::from_bytes(value.as_bytes())
        .map_err(|_| errs.push(format!("{field}: `{value}` is not a header name")))
        .ok()
}

/// Parses `methods`, each with [`parse_method`].
pub(super) fn methods(names: &[String], errs: &mut Vec<String>) -> Vec<http::Method> {
    let mut methods = Vec::new();
    for m in names {
        match parse_method(m) {
            Ok(m) => methods.push(m),
            Err(e) => errs.push(format!("methods: {e}")),
        }
    }
    methods
}

/// Parses `override_headers`: header names, none of them the key header (every keyed
/// request would be refused).
pub(super) fn override_headers(
    config: &super::Config,
    key_header: Option<&http::HeaderName>,
    errs: &mut Vec<String>,
) -> Vec<http::HeaderName> {
    let field = "override_headers";
    let mut names = Vec::new();
    for value in &config.override_headers {
        let Some(name) = header_name(field, value, errs) else {
            continue;
        };
        if Some(&name) == key_header {
            errs.push(format!(
                "{field}: `{value}` is the key header (header_name); every keyed request would be refused"
            ));
        }
        names.push(name);
    }
    names
}

pub(super) use idemgate_tower::parse_method;

/// The key of `principal_hash_key_file`, if set: the file's bytes without trailing
/// whitespace.
pub(super) fn principal_hash_key(
    path: &Option<String>,
    errs: &mut Vec<String>,
) -> Option<std::sync::Arc<idemgate_tower::PrincipalHashKey>> {
    let field = "principal_hash_key_file";
    let bytes = read(field, path, errs)?;
    idemgate_tower::PrincipalHashKey::new(bytes.trim_ascii_end())
        .map(std::sync::Arc::new)
        .map_err(|e| errs.push(format!("{field}: {e}")))
        .ok()
}

/// The bytes of the file at `path`, if set and readable.
pub(super) fn read(field: &str, path: &Option<String>, errs: &mut Vec<String>) -> Option<Vec<u8>> {
    let path = path.as_deref()?;
    std::fs::read(path)
        .map_err(|e| errs.push(format!("{field}: cannot read `{path}`: {e}")))
        .ok()
}
