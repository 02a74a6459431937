//! The idempotency contract of a [`Policy`] as OpenAPI: a fragment of its own (OpenAPI 3.1)
//! or added to the matching operations of an existing API description (OpenAPI 3.0 or 3.1).
//!
//! For every covered operation it describes the key header parameter (name, syntax, length
//! bounds, required or not), the `application/problem+json` answers idemgate gives itself
//! (`400`, `401`, `409` and `503` with `Retry-After`, `410`, `413`, `422`, `429`, `500`
//! `outcome-unknown`, ...; `docs/errors.md`), the `Idempotent-Replayed` header (and the
//! record-TTL header when the route sends it) on the API's own responses, and the route's
//! published policy (draft-ietf-httpapi-idempotency-key-header §2.4: a resource MUST publish
//! it) in an `x-idempotency` extension: `recordTtlSeconds`, `keyLifetime` (ISO 8601),
//! `keyRequired`, the fingerprint's rules.
//!
//! ```
//! use idemgate_tower::openapi::Contract;
//! use idemgate_tower::{Policy, RoutePolicy};
//!
//! let policy = Policy::default()
//!     .with_route("POST /payments", RoutePolicy::default().with_key_required(true))
//!     .unwrap();
//! let fragment = Contract::new(&policy).fragment();
//! let op = fragment.get("paths").and_then(|p| p.get("/payments")).and_then(|p| p.get("post"));
//! assert!(op.and_then(|o| o.get("x-idempotency")).is_some());
//! ```

mod describe;
mod doc;
mod merge;
mod utoipa;

pub use doc::Doc;
pub use merge::{MergeError, MergeReport};
pub use utoipa::UtoipaError;

use ::utoipa::openapi::path::{OperationBuilder, Parameter, ParameterBuilder, ParameterIn};
use ::utoipa::openapi::{InfoBuilder, Object, OpenApiBuilder, Required, Response, Type};
use http::Method;

use crate::policy::Policy;

/// The contract of a [`Policy`], ready to be written as OpenAPI.
#[derive(Debug, Clone, Copy)]
pub struct Contract<'a> {
    /// The routes and their policies.
    pub policy: &'a Policy,
    /// Also describe the gateway's own upstream answers (`502` `upstream-unreachable` and
    /// `upstream-failed`, `504` `upstream-timeout`). False for the tower layer.
    pub gateway: bool,
}

impl<'a> Contract<'a> {
    /// The contract of `policy` as the tower layer answers (no gateway-only problems).
    pub fn new(policy: &'a Policy) -> Self {
        Self {
            policy,
            gateway: false,
        }
    }

    /// An OpenAPI 3.1 document of the configured routes only: one operation per route
    /// (path parameters as strings; a catch-all `{*rest}` becomes `{rest}`), the shared
    /// components, and the default policy of covered requests matching no route as a
    /// top-level `x-idempotency`.
    pub fn fragment(&self) -> Doc {
        let info = InfoBuilder::new()
            .title("Idempotency contract")
            .version(env!("CARGO_PKG_VERSION"))
            .description(Some(format!(
                "The Idempotency-Key contract of the covered routes, as idemgate enforces it ({}). Merge it into the API's own description with `idemgate openapi --merge`.",
                describe::DRAFT
            )));
        let mut doc = Doc::of(&OpenApiBuilder::new().info(info).build());
        let theirs =
            "The API's own response, stored and replayed to every retry with the same key.";
        for (template, route) in self.policy.routes() {
            let Some((method, path)) = template.split_once(' ') else {
                continue;
            };
            let (path, params) = openapi_path(path);
            let op = OperationBuilder::new()
                .summary(Some(format!("{template} (covered by idemgate)")))
                .parameters(Some(params))
                .response("default", Response::new(theirs));
            let mut op = Doc::of(&op.build());
            self.apply(&mut op, route, Some(template));
            let item = doc
                .entry_object("paths")
                .and_then(|p| p.entry_object(&path));
            if let Some(m) = item.and_then(Doc::as_object_mut) {
                m.insert(method.to_ascii_lowercase(), op);
            }
        }
        self.add_components(&mut doc);
        let mut ext = describe::extension(self.policy, self.policy.default_route(), None);
        let methods: Vec<&str> = self.policy.methods.iter().map(Method::as_str).collect();
        ext["methods"] = methods.into();
        ext["appliesTo"] = "covered requests that match no configured route".into();
        if let Some(m) = doc.as_object_mut() {
            m.insert("x-idempotency".into(), Doc::from(ext));
        }
        doc
    }

    /// Adds the shared components (the problem schema, the headers) to `doc`'s.
    fn add_components(&self, doc: &mut Doc) {
        let components = doc.entry_object("components");
        let (Some(components), Doc::Object(ours)) = (components, Doc::of(&describe::components()))
        else {
            return;
        };
        for (kind, named) in ours {
            let section = components.entry_object(&kind).and_then(Doc::as_object_mut);
            if let (Some(section), Doc::Object(named)) = (section, named) {
                section.extend(named);
            }
        }
    }
}

/// An OpenAPI path and its path parameters from a route template's path.
fn openapi_path(template: &str) -> (String, Vec<Parameter>) {
    let (mut segments, mut params) = (Vec::new(), Vec::new());
    for seg in template.split('/') {
        let param = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}'));
        let Some(name) = param.filter(|_| !seg.starts_with("{{")) else {
            segments.push(seg.to_owned());
            continue;
        };
        let (name, description) = match name.strip_prefix('*') {
            Some(n) => (
                n,
                "The rest of the path (a catch-all: one or more segments).",
            ),
            None => (name, "A path segment."),
        };
        let param = ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Path)
            .required(Required::True)
            .description(Some(description))
            .schema(Some(Object::with_type(Type::String)));
        params.push(param.build());
        segments.push(format!("{{{name}}}"));
    }
    (segments.join("/"), params)
}

#[cfg(test)]
mod tests;
