//! Step 1 of [`Policy::resolve`] against its siblings: a path that matches one route as it
//! is and another only through letter-case folding or a `Same` trailing slash.
//!
//! With `POST /api/{resource}` and a case-insensitive `POST /api/pay`, `/api/PAY` is the
//! first route to a router that matches exactly first (matchit, Go's `ServeMux`) and the
//! second to Express, which tries routes in the order they were declared. Scoped as one and
//! run by the other, a retry spelled `/api/pay` would run the operation again; so such a
//! request is refused (`400 ambiguous-path`, [`IdempotencyRejection::AmbiguousRoute`]).

use std::sync::Arc;

use http::Method;

use super::super::{Policy, RoutePolicy};
use crate::path::{fold_case, toggle_trailing_slash, TrailingSlash};
use crate::rejection::IdempotencyRejection;

type Route = (String, Arc<RoutePolicy>);

impl Policy {
    /// The route `router` matches `path` to.
    pub(super) fn route_at(
        &self,
        router: Option<&matchit::Router<usize>>,
        path: &str,
    ) -> Option<&Route> {
        let m = router?.at(path).ok()?;
        Some(&self.routes[*m.value])
    }

    /// Refuses `path`, which `found` matches as it is, when another route reaches it through
    /// folding (a `case_insensitive` route) or a trailing slash added or removed (a route
    /// with [`TrailingSlash::Same`]). Looks only when some route of `method` folds, or
    /// some route has `Same`.
    pub(super) fn refuse_siblings(
        &self,
        method: &Method,
        path: &str,
        found: &Route,
    ) -> Result<(), IdempotencyRejection> {
        let folded = self.folded.get(method);
        if folded.is_some() {
            if let Some(other) = self.route_at(folded, &fold_case(path)) {
                refuse_overlap(found, other, path)?;
            }
        }
        if !self.trailing_same {
            return Ok(());
        }
        let Some(toggled) = toggle_trailing_slash(path) else {
            return Ok(());
        };
        let as_toggled = self.route_at(self.matchers.get(method), &toggled);
        let folded_toggled = folded.and_then(|_| self.route_at(folded, &fold_case(&toggled)));
        for other in [as_toggled, folded_toggled].into_iter().flatten() {
            if other.1.trailing_slash == TrailingSlash::Same {
                refuse_overlap(found, other, path)?;
            }
        }
        Ok(())
    }
}

/// `AmbiguousRoute` when `other` is another route than `found` and does not match `path`
/// as it is (a plain overlap, such as a static segment and a parameter, is the router's
/// to decide, as before).
fn refuse_overlap(found: &Route, other: &Route, path: &str) -> Result<(), IdempotencyRejection> {
    if std::ptr::eq(found, other) || matches_as_is(&other.0, path) {
        return Ok(());
    }
    Err(IdempotencyRejection::AmbiguousRoute {
        route: found.0.clone(),
        sibling: other.0.clone(),
    })
}

/// Whether the template of `route` (`METHOD /template`) matches `path` without folding or
/// toggling. Builds a router of one route: only on the rare path where two routes differ.
fn matches_as_is(route: &str, path: &str) -> bool {
    let template = route.split_once(' ').map_or(route, |(_, t)| t);
    let mut router = matchit::Router::new();
    router.insert(template, ()).is_ok() && router.at(path).is_ok()
}
