//! Route matching: a covered request's path, in normal form ([`crate::path`]), against the
//! route templates, with the per-route settings of trailing slashes, encoded slashes and
//! letter case.

use std::borrow::Cow;
use std::sync::Arc;

use http::Method;

use super::{Policy, RoutePolicy};
use crate::metrics::UNMATCHED;
use crate::path::{
    fold_case, normalise, text_normal_form, toggle_trailing_slash, EncodedSlash, ForwardPath,
    NormalPath, PathAmbiguity, TrailingSlash, Unmatched,
};
use crate::rejection::IdempotencyRejection;

mod siblings;

/// A resolved route: its scope name and policy.
#[derive(Debug)]
pub struct Resolved<'a> {
    /// The route part of the scope: the template, or `METHOD /concrete/path` if none matched.
    pub route: Cow<'a, str>,
    /// The route template for metric labels: the template, or `(unmatched)`.
    pub label: Cow<'a, str>,
    /// The policy to apply.
    pub policy: &'a Arc<RoutePolicy>,
    /// The path to forward instead of the one sent: its normal form, when
    /// [`Policy::forward_path`] is [`ForwardPath::Normalised`] and the two differ.
    pub forward: Option<String>,
}

/// What [`Policy::resolve`] gives a covered request: its route, or the answer refusing it.
pub type Resolution<'a> = Result<Resolved<'a>, IdempotencyRejection>;

/// The longest scope route, in bytes: `METHOD /path` of a covered request that matches no
/// route, after normalisation (and of a route template, checked when it is added). A longer
/// one gets `414 path-too-long` ([`IdempotencyRejection::PathTooLong`]), nothing stored or
/// forwarded: the key service's store API refuses routes over 1,024 bytes, and PostgreSQL's
/// btree index on `(user_id, route, key)` refuses entries over about 2.7 KB, so such a
/// scope could never be stored (every attempt would answer `503`).
pub const MAX_SCOPE_ROUTE_BYTES: usize = 1024;

impl Policy {
    /// The route and policy for a request, `None` when its method is not covered, or the
    /// refusal of a covered request (with or without a key; nothing is stored or forwarded).
    ///
    /// A method that is a covered one in another letter case (`post`, `Post`) is refused
    /// with `400 ambiguous-request` ([`IdempotencyRejection::AmbiguousMethod`]): methods are
    /// case-sensitive (RFC 9110 §9.1) and hyper keeps `post` apart from `POST`, but Werkzeug
    /// upper-cases the method before routing and Django's views lower-case it, so the
    /// upstream may run the covered operation.
    ///
    /// The path is first brought to its normal form ([`crate::path::normalise`], RFC 3986
    /// §6.2.2); a spelling that servers read differently is refused with `400
    /// ambiguous-path` ([`IdempotencyRejection::AmbiguousPath`]). The normal form is then
    /// matched, and the first of these decides:
    ///
    /// 1. a template that matches it as it is; when another route reaches the path only
    ///    through step 2 or a `Same` trailing slash of step 3 (`/api/PAY` on `POST
    ///    /api/{resource}` and a case-insensitive `POST /api/pay`), servers disagree on
    ///    which handler runs (Express takes the first declared): `400 ambiguous-path`
    ///    ([`IdempotencyRejection::AmbiguousRoute`]);
    /// 2. a [`case_insensitive`](RoutePolicy::case_insensitive) template that matches it
    ///    with its letters folded to lower case;
    /// 3. a template (case-sensitive, then case-insensitive) that matches it with a
    ///    trailing `/` removed, or added: that route's [`TrailingSlash`] setting makes it
    ///    the route (`Same`) or refuses the request (`Refuse`, the default);
    /// 4. no route: `404 no-such-route` under [`Unmatched::Refuse`]; otherwise the default
    ///    policy, whose settings apply to the path (a trailing `/` is refused, or dropped
    ///    with `Same`; the path is folded to lower case when `case_insensitive`), scoped by
    ///    `METHOD /concrete/path`, which is refused with `414 path-too-long`
    ///    ([`IdempotencyRejection::PathTooLong`]) past [`MAX_SCOPE_ROUTE_BYTES`].
    ///
    /// A path holding an encoded `/` (`%2F`) is refused unless the route it reached (or the
    /// default policy) has [`EncodedSlash::Keep`]. A path already in normal form gets the
    /// scope it got before normalisation existed: the template, or `METHOD /path` as sent.
    pub fn resolve<'a>(&'a self, method: &Method, path: &str) -> Option<Resolution<'a>> {
        if !self.methods.contains(method) {
            return self.method_in_other_case(method).map(Err);
        }
        Some(self.resolve_covered(method, path))
    }

    /// Whether a request with `method` passes untouched: not covered, nor a covered method
    /// in another letter case (which [`Policy::resolve`] refuses).
    pub(crate) fn passes_untouched(&self, method: &Method) -> bool {
        !self.methods.contains(method) && self.method_in_other_case(method).is_none()
    }

    /// The refusal of a method that is not covered but equals a covered one ignoring ASCII
    /// case.
    fn method_in_other_case(&self, method: &Method) -> Option<IdempotencyRejection> {
        let sent = method.as_str();
        self.methods
            .iter()
            .any(|m| m.as_str().eq_ignore_ascii_case(sent))
            .then(|| IdempotencyRejection::AmbiguousMethod {
                method: sent.to_owned(),
            })
    }

    /// The route and policy for a request with `parts`: [`Policy::resolve`], except under
    /// axum's `Router::route_layer` (feature `axum`), where a request carries the template
    /// of the route it matched (`MatchedPath`) and that decides: a configured route with
    /// that very template applies, then one matching the path, and otherwise the default
    /// policy, scoped and labelled by that template, so routes are declared once, in axum.
    pub fn resolve_parts<'a>(&'a self, parts: &http::request::Parts) -> Option<Resolution<'a>> {
        #[cfg(feature = "axum")]
        if let Some(matched) = parts.extensions.get::<axum::extract::MatchedPath>() {
            return self.resolve_template(&parts.method, parts.uri.path(), matched.as_str());
        }
        self.resolve(&parts.method, parts.uri.path())
    }

    /// [`Policy::resolve_parts`] for a request that axum matched to `template`: never
    /// refused for its path (axum routed it), forwarded as sent.
    #[cfg(feature = "axum")]
    fn resolve_template<'a>(
        &'a self,
        method: &Method,
        path: &str,
        template: &str,
    ) -> Option<Resolution<'a>> {
        if !self.methods.contains(method) {
            return self.method_in_other_case(method).map(Err);
        }
        let route = route_of(method, template);
        let (route, label, policy) = match self.routes.iter().find(|(r, _)| *r == route) {
            Some((r, policy)) => (r.as_str().into(), r.as_str().into(), policy),
            None => match self.resolve(method, path)? {
                Ok(found) if found.label != UNMATCHED => (found.route, found.label, found.policy),
                _ => (route.clone().into(), route.into(), &self.default_route),
            },
        };
        let forward = None;
        Some(Ok(Resolved {
            route,
            label,
            policy,
            forward,
        }))
    }

    fn resolve_covered<'a>(&'a self, method: &Method, path: &str) -> Resolution<'a> {
        let normal = normalise(path).map_err(IdempotencyRejection::AmbiguousPath)?;
        let forward = (self.forward_path == ForwardPath::Normalised && normal.as_str() != path)
            .then(|| normal.as_str().to_owned());
        let Some((route, policy)) = self.find(method, normal.as_str())? else {
            return self.unmatched_route(method, normal, forward);
        };
        if normal.encoded_slash() && policy.encoded_slash == EncodedSlash::Refuse {
            return Err(IdempotencyRejection::AmbiguousPath(
                PathAmbiguity::EncodedSlash,
            ));
        }
        Ok(Resolved {
            route: route.as_str().into(),
            label: route.as_str().into(),
            policy,
            forward,
        })
    }

    /// The route `path` (in normal form) reaches, by steps 1 to 3 of [`Policy::resolve`].
    fn find(
        &self,
        method: &Method,
        path: &str,
    ) -> Result<Option<&(String, Arc<RoutePolicy>)>, IdempotencyRejection> {
        let exact = self.matchers.get(method);
        let folded = self.folded.get(method);
        if exact.is_none() && folded.is_none() {
            return Ok(None);
        }
        let at = |router, p: &str| self.route_at(router, p);
        if let Some(found) = at(exact, path) {
            self.refuse_siblings(method, path, found)?;
            return Ok(Some(found));
        }
        if folded.is_some() {
            if let Some(found) = at(folded, &fold_case(path)) {
                return Ok(Some(found));
            }
        }
        let Some(toggled) = toggle_trailing_slash(path) else {
            return Ok(None);
        };
        let found = at(exact, &toggled).or_else(|| {
            let folded_toggled = folded.map(|_| fold_case(&toggled));
            at(folded, folded_toggled.as_deref()?)
        });
        match found {
            Some(found) if found.1.trailing_slash == TrailingSlash::Same => Ok(Some(found)),
            Some(_) => Err(IdempotencyRejection::AmbiguousPath(
                PathAmbiguity::TrailingSlash,
            )),
            None => Ok(None),
        }
    }

    /// Step 4 of [`Policy::resolve`]: a covered request that matches no route.
    fn unmatched_route<'a>(
        &'a self,
        method: &Method,
        normal: NormalPath<'_>,
        forward: Option<String>,
    ) -> Resolution<'a> {
        let refuse = |why| Err(IdempotencyRejection::AmbiguousPath(why));
        if self.unmatched == Unmatched::Refuse {
            return Err(IdempotencyRejection::NoSuchRoute);
        }
        let policy = &self.default_route;
        if normal.encoded_slash() && policy.encoded_slash == EncodedSlash::Refuse {
            return refuse(PathAmbiguity::EncodedSlash);
        }
        let trailing = normal.trailing_slash();
        let mut path = normal.into_cow();
        if trailing {
            if policy.trailing_slash == TrailingSlash::Refuse {
                return refuse(PathAmbiguity::TrailingSlash);
            }
            let stripped = path.len() - 1;
            path = Cow::Owned(path[..stripped].to_owned());
        }
        if policy.case_insensitive {
            path = Cow::Owned(fold_case(&path).into_owned());
        }
        let route = route_of(method, &path);
        if route.len() > MAX_SCOPE_ROUTE_BYTES {
            return Err(IdempotencyRejection::PathTooLong {
                limit: MAX_SCOPE_ROUTE_BYTES,
            });
        }
        Ok(Resolved {
            route: route.into(),
            label: UNMATCHED.into(),
            policy,
            forward,
        })
    }

    /// Adds the template `path` (already checked by `crate::template::check`) of route
    /// `index` to the routers of `method`: to the case-insensitive ones too, in lower case,
    /// when `case_insensitive`.
    ///
    /// # Errors
    /// A template not in normal form, longer than [`MAX_SCOPE_ROUTE_BYTES`] with its
    /// method, or one the router refuses (a duplicate, a conflict).
    pub(super) fn insert_matcher(
        &mut self,
        method: &Method,
        path: &str,
        index: usize,
        policy: &RoutePolicy,
    ) -> Result<(), String> {
        check_normal_form(path)?;
        if method.as_str().len() + 1 + path.len() > MAX_SCOPE_ROUTE_BYTES {
            return Err(format!(
                "longer than {MAX_SCOPE_ROUTE_BYTES} bytes with its method, the most a scope's route holds"
            ));
        }
        let case_insensitive = policy.case_insensitive;
        self.trailing_same |= policy.trailing_slash == TrailingSlash::Same;
        self.matchers
            .entry(method.clone())
            .or_default()
            .insert(path, index)
            .map_err(|e| crate::template::insert_error(e, method, path))?;
        if case_insensitive {
            let folded = fold_case(path);
            self.folded
                .entry(method.clone())
                .or_default()
                .insert(folded.as_ref(), index)
                .map_err(|e| {
                    let why = crate::template::insert_error(e, method, &folded);
                    format!("with case_insensitive, in lower case: {why}")
                })?;
        }
        Ok(())
    }
}

/// A route's scope text, `METHOD path`, built for every request a policy resolves (without
/// `format!`'s machinery, about 1k instructions a request).
fn route_of(method: &Method, path: &str) -> String {
    let method = method.as_str();
    let mut route = String::with_capacity(method.len() + 1 + path.len());
    route.push_str(method);
    route.push(' ');
    route.push_str(path);
    route
}

/// Checks that a template's literal text is in normal form, so that requests can match it:
/// its parameters stand for any segment text, its literal braces (`{{`, `}}`) for `{` and
/// `}`, which requests spell `%7B` and `%7D`.
fn check_normal_form(template: &str) -> Result<(), String> {
    let (probe, normal) = template_normal_form(template);
    let never = |why: PathAmbiguity| {
        format!("a request path with {why} is refused (400 ambiguous-path), so this route would never match")
    };
    normalise(&probe).map_err(never)?;
    match normal.map_err(never)? {
        normal if normal != template => Err(format!(
            "requests are matched in their normal form (RFC 3986 §6.2.2), so this route would never match; write `{normal}`"
        )),
        _ => Ok(()),
    }
}

/// A request path the template matches (each parameter as `p`), and the template with its
/// literal text in normal form.
fn template_normal_form(template: &str) -> (String, Result<String, PathAmbiguity>) {
    let (mut probe, mut normal, mut literal) = (String::new(), Ok(String::new()), String::new());
    let flush = |literal: &mut String, probe: &mut String, normal: &mut Result<String, _>| {
        probe.push_str(literal);
        if let Ok(out) = normal {
            match text_normal_form(literal) {
                Ok(text) => out.push_str(&text),
                Err(why) => *normal = Err(why),
            }
        }
        literal.clear();
    };
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        let param_end = rest.find('}').map_or(rest.len(), |end| end + 1);
        let taken = match c {
            '{' | '}' if rest[1..].starts_with(c) => {
                literal.push(c);
                2
            }
            '{' => {
                flush(&mut literal, &mut probe, &mut normal);
                probe.push('p');
                if let Ok(out) = &mut normal {
                    out.push_str(&rest[..param_end]);
                }
                param_end
            }
            _ => {
                literal.push(c);
                c.len_utf8()
            }
        };
        rest = &rest[taken..];
    }
    flush(&mut literal, &mut probe, &mut normal);
    (probe, normal)
}

#[cfg(test)]
mod tests;
