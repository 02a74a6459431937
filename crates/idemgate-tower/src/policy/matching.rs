//! Route matching: a covered request's path, in normal form ([`crate::path`]), against the
//! route templates, with the per-route settings of trailing slashes, encoded slashes and
//! letter case.

use std::borrow::Cow;
use std::sync::Arc;

use http::Method;

use super::{Policy, Resolved, RoutePolicy};
use crate::metrics::UNMATCHED;
use crate::path::{
    fold_case, normalise, toggle_trailing_slash, EncodedSlash, ForwardPath, NormalPath,
    PathAmbiguity, TrailingSlash, Unmatched,
};
use crate::rejection::IdempotencyRejection;

/// What [`Policy::resolve`] gives a covered request: its route, or the answer refusing it.
pub type Resolution<'a> = Result<Resolved<'a>, IdempotencyRejection>;

impl Policy {
    /// The route and policy for a request, `None` when its method is not covered, or the
    /// refusal of a covered request (with or without a key; nothing is stored or forwarded).
    ///
    /// The path is first brought to its normal form ([`crate::path::normalise`], RFC 3986
    /// §6.2.2); a spelling that servers read differently is refused with `400
    /// ambiguous-path` ([`IdempotencyRejection::AmbiguousPath`]). The normal form is then
    /// matched, and the first of these decides:
    ///
    /// 1. a template that matches it as it is;
    /// 2. a [`case_insensitive`](RoutePolicy::case_insensitive) template that matches it
    ///    with its letters folded to lower case;
    /// 3. a template (case-sensitive, then case-insensitive) that matches it with a
    ///    trailing `/` removed, or added: that route's [`TrailingSlash`] setting makes it
    ///    the route (`Same`) or refuses the request (`Refuse`, the default);
    /// 4. no route: `404 no-such-route` under [`Unmatched::Refuse`]; otherwise the default
    ///    policy, whose settings apply to the path (a trailing `/` is refused, or dropped
    ///    with `Same`; the path is folded to lower case when `case_insensitive`), scoped by
    ///    `METHOD /concrete/path`.
    ///
    /// A path holding an encoded `/` (`%2F`) is refused unless the route it reached (or the
    /// default policy) has [`EncodedSlash::Keep`]. A path already in normal form gets the
    /// scope it got before normalisation existed: the template, or `METHOD /path` as sent.
    pub fn resolve<'a>(&'a self, method: &Method, path: &str) -> Option<Resolution<'a>> {
        if !self.methods.contains(method) {
            return None;
        }
        Some(self.resolve_covered(method, path))
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
        let route = format!("{method} {template}");
        if let Some((r, policy)) = self.routes.iter().find(|(r, _)| *r == route) {
            let (route, label) = (r.as_str().into(), r.as_str().into());
            return Some(Ok(Resolved {
                route,
                label,
                policy,
                forward: None,
            }));
        }
        match self.resolve(method, path)? {
            Ok(matched) if matched.label != UNMATCHED => Some(Ok(Resolved {
                forward: None,
                ..matched
            })),
            _ => Some(Ok(Resolved {
                label: route.clone().into(),
                route: route.into(),
                policy: &self.default_route,
                forward: None,
            })),
        }
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
        let at = |router: Option<&matchit::Router<usize>>, p: &str| {
            let m = router?.at(p).ok()?;
            Some(&self.routes[*m.value])
        };
        if let Some(found) = at(exact, path) {
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
        Ok(Resolved {
            route: format!("{method} {path}").into(),
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
    /// A template not in normal form, or one the router refuses (a duplicate, a conflict).
    pub(super) fn insert_matcher(
        &mut self,
        method: &Method,
        path: &str,
        index: usize,
        case_insensitive: bool,
    ) -> Result<(), String> {
        check_normal_form(path)?;
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

/// Checks that a template's literal text is in normal form, so that requests can match it.
fn check_normal_form(path: &str) -> Result<(), String> {
    match normalise(path) {
        Err(why) => Err(format!(
            "a request path with {why} is refused (400 ambiguous-path), so this route would never match"
        )),
        Ok(normal) if normal.as_str() != path => Err(format!(
            "requests are matched in their normal form (RFC 3986 §6.2.2), so this route would never match; write `{}`",
            normal.as_str()
        )),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests;
