//! What the admin commands read from the gateways' configuration (`--config`): the route
//! policies (principal sources, `max_lease`), the gateways' `upstream_timeout`, and the
//! configured route templates, so a `--route` that no record can carry is pointed out.

use std::path::Path;

use http::Method;
use idemgate_tower::Policy;

use crate::cli::StoreArgs;
use crate::config::AdminView;

/// The gateways' configuration: the `--config` file, or the built-in defaults without one
/// (`None` path). Only what admin commands read is checked
/// ([`Config::admin_view`](crate::config::Config::admin_view)): an operator's file may name
/// only the store.
///
/// # Errors
/// An unreadable or invalid file, every problem listed.
pub(crate) fn load(store: &StoreArgs) -> anyhow::Result<AdminView> {
    store
        .file()?
        .admin_view()
        .map_err(|errs| crate::cli::invalid(&errs))
}

/// A note for an operator whose `--route` is not one of the templates in `file`: with the
/// configured templates, and whether a record can carry it at all. A request that matches
/// no template is scoped by `METHOD /concrete/path`, so such a route names records only
/// when the configuration resolves that very path to it; a method that is not covered, a
/// refused path or a path another template matches never does. `None` for a template.
pub(crate) fn route_note(policy: &Policy, route: &str, file: &Path) -> Option<String> {
    if policy.routes().any(|(r, _)| r == route) {
        return None;
    }
    let templates: Vec<String> = policy.routes().map(|(r, _)| format!("`{r}`")).collect();
    let templates = match templates.is_empty() {
        true => "none".to_owned(),
        false => templates.join(", "),
    };
    let head = format!(
        "note: `{route}` is not a route configured in {} (its routes: {templates})",
        file.display()
    );
    let Some((method, path)) = route.trim().split_once(' ') else {
        return Some(format!("{head}; a route is `METHOD /path`"));
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Some(format!("{head}; `{method}` is not an HTTP method"));
    };
    let tail = match policy.resolve(&method, path.trim()) {
        None => format!("; {method} is not a covered method, so no record has this route"),
        Some(Err(refused)) => format!(
            "; a request to this path is refused ({} {}), so no record has this route",
            refused.status().as_u16(),
            refused.anchor()
        ),
        Some(Ok(resolved)) if resolved.route == route => {
            "; it names only records of requests to exactly this path, which matched no route"
                .to_owned()
        }
        Some(Ok(resolved)) => format!(
            "; requests to this path are scoped by `{0}`: pass --route \"{0}\"",
            resolved.route
        ),
    };
    Some(format!("{head}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate_tower::RoutePolicy;

    fn policy() -> Policy {
        let p = Policy::default().with_route("POST /charges", RoutePolicy::default());
        let p = p.unwrap();
        p.with_route("POST /charges/{id}/refunds", RoutePolicy::default())
            .unwrap()
    }

    fn note(route: &str) -> Option<String> {
        route_note(&policy(), route, Path::new("gw.toml"))
    }

    #[test]
    fn a_template_needs_no_note() {
        assert_eq!(note("POST /charges"), None);
        assert_eq!(note("POST /charges/{id}/refunds"), None);
    }

    #[test]
    fn a_typo_is_pointed_out_with_the_templates() {
        let n = note("POST /charge").unwrap();
        assert!(
            n.contains("`POST /charge` is not a route configured in gw.toml"),
            "{n}"
        );
        assert!(
            n.contains("`POST /charges`, `POST /charges/{id}/refunds`"),
            "{n}"
        );
        assert!(n.contains("requests to exactly this path"), "{n}");
    }

    #[test]
    fn routes_no_record_can_have_say_so() {
        let n = note("GET /charges").unwrap();
        assert!(n.contains("GET is not a covered method"), "{n}");
        let n = note("POST /charges/ch_1/refunds").unwrap();
        assert!(
            n.contains("pass --route \"POST /charges/{id}/refunds\""),
            "{n}"
        );
        let n = note("POST //charges").unwrap();
        assert!(n.contains("400 ambiguous-path"), "{n}");
        assert!(note("/charges").unwrap().contains("`METHOD /path`"));
    }
}
