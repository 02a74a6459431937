//! Adding the contract to the operations of an existing API description.

use std::collections::BTreeSet;

use http::{Method, StatusCode};
use utoipa::openapi::{Header, HeaderBuilder, ObjectBuilder, RefOr, Response, Type};

use super::describe;
use super::doc::Doc;
use super::Contract;
use crate::policy::{RoutePolicy, StatusAction};

/// What [`Contract::merge_into`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// The operations extended, as `METHOD /path` of the description, with the route
    /// template that matched them (`None`: the default policy).
    pub operations: Vec<(String, Option<String>)>,
    /// Configured routes that matched no operation of the description.
    pub unmatched_routes: Vec<String>,
}

/// Why a document cannot be merged into.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeError {
    /// The document is not an object with an `openapi` version string.
    #[error("not an OpenAPI description: no `openapi` version field at the top level")]
    NotOpenApi,
    /// The `openapi` field names a version other than 3.0.x or 3.1.x.
    #[error("`openapi: {0}` is not supported: OpenAPI 3.0.x or 3.1.x")]
    UnsupportedVersion(String),
    /// A part that must be an object is not.
    #[error("`{0}` must be an object")]
    NotAnObject(String),
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

impl Contract<'_> {
    /// Adds the contract to every covered operation of `doc` (OpenAPI 3.0.x or 3.1.x) whose
    /// path the policy's routes match (by the same router the layer uses, also under the
    /// path of each `servers` URL); covered operations matching no route get the default
    /// policy. Everything else is left as it was, in its order. Components are added under
    /// names starting with `Idemgate`.
    ///
    /// # Errors
    /// [`MergeError`] when `doc` is not an OpenAPI 3.0/3.1 object.
    pub fn merge_into(&self, doc: &mut Doc) -> Result<MergeReport, MergeError> {
        check_version(doc)?;
        let prefixes = server_prefixes(doc);
        let not_object = |what: String| MergeError::NotAnObject(what);
        let paths = match doc.as_object_mut().and_then(|m| m.get_mut("paths")) {
            Some(paths) => Some(paths.as_object_mut().ok_or(not_object("paths".into()))?),
            None => None,
        };
        let mut report = MergeReport::default();
        for (path, item) in paths.into_iter().flatten() {
            let item = item.as_object_mut();
            let item = item.ok_or_else(|| not_object(format!("paths.{path}")))?;
            for (name, op) in item.iter_mut() {
                if !METHODS.contains(&name.as_str()) {
                    continue;
                }
                let method = Method::from_bytes(name.to_ascii_uppercase().as_bytes())
                    .expect("a standard method");
                let Some((template, route)) = resolve(self, &method, path, &prefixes) else {
                    continue;
                };
                if op.as_object().is_none() {
                    return Err(not_object(format!("paths.{path}.{name}")));
                }
                self.apply(op, &route, template.as_deref());
                report
                    .operations
                    .push((format!("{method} {path}"), template));
            }
        }
        let ops = &report.operations;
        let matched: BTreeSet<&str> = ops.iter().filter_map(|(_, t)| t.as_deref()).collect();
        let routes = self.policy.routes().map(|(t, _)| t);
        let unmatched = routes.filter(|t| !matched.contains(t)).map(str::to_owned);
        report.unmatched_routes = unmatched.collect();
        self.add_components(doc);
        Ok(report)
    }

    /// Adds the key parameter, the problem responses, the replay headers and the
    /// extension of `route` to the operation object `op`.
    pub(super) fn apply(&self, op: &mut Doc, route: &RoutePolicy, template: Option<&str>) {
        let policy = self.policy;
        let Some(m) = op.as_object_mut() else {
            return;
        };
        let header = policy.header_name.as_str();
        let params = m
            .entry("parameters".to_owned())
            .or_insert_with(|| Doc::Array(Vec::new()));
        if let Doc::Array(list) = params {
            let is_key = |p: &Doc| {
                let text = |field| p.get(field).and_then(Doc::as_str);
                let named = |n: &str| n.eq_ignore_ascii_case(header);
                text("in") == Some("header") && text("name").is_some_and(named)
            };
            list.retain(|p| !is_key(p));
            list.insert(0, Doc::of(&describe::key_parameter(policy, route)));
        }
        let responses = m.entry("responses".to_owned()).or_insert_with(Doc::object);
        if let Some(responses) = responses.as_object_mut() {
            for (status, response) in responses.iter_mut() {
                let ours = response.get(describe::PROBLEMS_MARK).is_some();
                if replayable(route, status) && !ours {
                    add_headers(response, describe::replay_headers(route));
                }
            }
            for (status, anchors) in describe::problems(self, route) {
                let ours = describe::problem_response(policy, status, &anchors);
                match responses.get_mut(&status.to_string()) {
                    None => {
                        responses.insert(status.to_string(), Doc::of(&ours));
                    }
                    Some(theirs) => combine(theirs, ours),
                }
            }
            responses.sort_by(|a, _, b, _| status_order(a).cmp(&status_order(b)));
        }
        m.insert(
            "x-idempotency".into(),
            Doc::from(describe::extension(policy, route, template)),
        );
    }
}

/// Refuses a document that is not OpenAPI 3.0.x or 3.1.x.
fn check_version(doc: &Doc) -> Result<(), MergeError> {
    match doc.get("openapi") {
        None => Err(MergeError::NotOpenApi),
        Some(Doc::String(v)) if v.starts_with("3.0.") || v.starts_with("3.1.") => Ok(()),
        Some(Doc::String(v)) => Err(MergeError::UnsupportedVersion(v.clone())),
        Some(other) => {
            let written = serde_json::to_string(other).unwrap_or_default();
            Err(MergeError::UnsupportedVersion(format!(
                "{written} (not a string: write the full version, e.g. \"3.1.0\")"
            )))
        }
    }
}

/// The route template (or `None` for the default) and policy of an operation, when its
/// method is covered: the first of `path` and `prefix + path` that a route matches.
fn resolve(
    contract: &Contract<'_>,
    method: &Method,
    path: &str,
    prefixes: &[String],
) -> Option<(Option<String>, RoutePolicy)> {
    let policy = contract.policy;
    let probes =
        std::iter::once(path.to_owned()).chain(prefixes.iter().map(|p| format!("{p}{path}")));
    let mut default = None;
    for probe in probes {
        // A probe the gateway would refuse (`ambiguous-path`, `no-such-route`) has no route.
        let Ok(resolved) = policy.resolve(method, &probe)? else {
            continue;
        };
        if resolved.label != "(unmatched)" {
            return Some((
                Some(resolved.label.to_string()),
                (**resolved.policy).clone(),
            ));
        }
        default.get_or_insert_with(|| (**resolved.policy).clone());
    }
    default.map(|p| (None, p))
}

/// The paths of the `servers` URLs (`https://api.example.com/v1` → `/v1`), without a
/// trailing `/`; server variables are left out.
fn server_prefixes(doc: &Doc) -> Vec<String> {
    let Some(Doc::Array(servers)) = doc.get("servers") else {
        return Vec::new();
    };
    servers
        .iter()
        .filter_map(|s| s.get("url").and_then(Doc::as_str))
        .filter_map(|url| {
            let path = match url.split_once("://") {
                Some((_, rest)) => rest.find('/').map_or("", |i| &rest[i..]),
                None => url,
            };
            let path = path.trim_end_matches('/');
            (path.starts_with('/') && !path.contains('{')).then(|| path.to_owned())
        })
        .collect()
}

/// Responses in status order, `default` last, as API descriptions list them.
fn status_order(status: &str) -> (u8, String) {
    match status {
        "default" => (1, String::new()),
        s => (0, s.to_ascii_uppercase()),
    }
}

/// Whether a response key (`201`, `2XX`, `default`) names a status the route stores.
fn replayable(route: &RoutePolicy, status: &str) -> bool {
    if status == "default" {
        return true;
    }
    let code = match status.to_ascii_uppercase().strip_suffix("XX") {
        Some(class) => class.parse::<u16>().ok().map(|c| c * 100),
        None => status.parse::<u16>().ok(),
    };
    code.and_then(|c| StatusCode::from_u16(c).ok())
        .is_some_and(|s| {
            route.action_for(s, &http::HeaderMap::new()) == StatusAction::Store
                && s != StatusCode::NOT_MODIFIED
        })
}

/// Adds `headers` to a response object (not to a `$ref`), keeping any already there.
fn add_headers(response: &mut Doc, headers: Vec<(&'static str, RefOr<Header>)>) {
    if response.get("$ref").is_some() {
        return;
    }
    let Some(list) = response
        .entry_object("headers")
        .and_then(Doc::as_object_mut)
    else {
        return;
    };
    for (name, header) in headers {
        if !list.keys().any(|k| k.eq_ignore_ascii_case(name)) {
            list.insert(name.to_owned(), Doc::of(&header));
        }
    }
}

/// The API documents a status idemgate answers too: its own answers stay, idemgate's are
/// added as a problem+json alternative (`anyOf` when both use that media type).
fn combine(theirs: &mut Doc, ours: Response) {
    if theirs.get("$ref").is_some() {
        return;
    }
    let Some(t) = theirs.as_object_mut() else {
        return;
    };
    let note = ours.description;
    let description = match t.get("description").and_then(Doc::as_str) {
        Some(d) if d.contains(&note) => d.to_owned(),
        Some(d) => format!("{d}\n\n{note}"),
        None => note,
    };
    t.insert("description".into(), Doc::String(description));
    let media = Doc::of(&ours.content["application/problem+json"]);
    if let Some(content) = theirs.entry_object("content").and_then(Doc::as_object_mut) {
        match content.get_mut("application/problem+json") {
            None => {
                content.insert("application/problem+json".into(), media);
            }
            Some(existing) if !holds(existing.get("schema"), media.get("schema")) => {
                let theirs = existing.get("schema").cloned();
                if let (Some(e), Some(t), Some(o)) = (
                    existing.as_object_mut(),
                    theirs,
                    media.get("schema").cloned(),
                ) {
                    let any = [("anyOf".to_owned(), Doc::Array(vec![t, o]))];
                    e.insert("schema".into(), Doc::Object(any.into_iter().collect()));
                }
            }
            Some(_) => {}
        }
    }
    // The API's own answer with this status may come without it: not required here.
    if ours.headers.contains_key("Retry-After") {
        let about = "On idemgate's answers: seconds to wait before retrying with the same key (RFC 9110 §10.2.3).";
        let optional = HeaderBuilder::new().description(Some(about)).schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(0)),
        ));
        add_headers(theirs, vec![("Retry-After", RefOr::T(optional.build()))]);
    }
}

/// Whether `schema` is `ours`, or an `anyOf` that has it already (a merged description).
fn holds(schema: Option<&Doc>, ours: Option<&Doc>) -> bool {
    if schema == ours {
        return true;
    }
    match schema.and_then(|s| s.get("anyOf")) {
        Some(Doc::Array(list)) => list.iter().any(|s| Some(s) == ours),
        _ => false,
    }
}
