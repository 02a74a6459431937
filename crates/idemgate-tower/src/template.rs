//! Route template syntax: what the router (matchit 0.8) matches, checked before it is given
//! a template, so a template that would silently never match is refused with the right
//! spelling instead.
//!
//! A template is a path of `/`-separated segments. A segment is literal text, a parameter
//! `{name}` (one per segment, after an optional literal prefix: `/v{version}`), or, as the
//! last segment only, a catch-all `{*name}`. Literal braces are written `{{` and `}}`.

use http::Method;

use crate::policy::MAX_ROUTE_PARAMS;

/// Checks the path of a route template (after `METHOD `).
///
/// # Errors
/// A message naming the offending segment and, where there is one, the right spelling:
/// `:id` and `*rest` (other routers' syntax, which matchit takes literally), unbalanced or
/// empty braces, parameter names other than letters, digits, `_` and `-`, and a catch-all
/// before the last segment; or a template with more than [`MAX_ROUTE_PARAMS`] parameters.
pub(crate) fn check(path: &str) -> Result<(), String> {
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let last = segments.len().saturating_sub(1);
    for (i, seg) in segments.iter().enumerate() {
        if let Some(right) = respelled(seg) {
            let what = if right.starts_with("{*") {
                "a catch-all is written"
            } else {
                "parameters are written"
            };
            let path: Vec<String> = segments
                .iter()
                .map(|s| respelled(s).unwrap_or_else(|| (*s).to_owned()))
                .collect();
            return Err(format!(
                "`{seg}` would match only the literal text `{seg}`; {what} `{right}` (did you mean `/{}`?)",
                path.join("/")
            ));
        }
        check_segment(seg, i == last)?;
    }
    // matchit panics past 25 parameters; `{{` is an escaped brace, not a parameter.
    if path.replace("{{", "").matches('{').count() > MAX_ROUTE_PARAMS {
        return Err(format!("more than {MAX_ROUTE_PARAMS} parameters"));
    }
    // A request path never holds these (a query is not part of the path; spaces and angle
    // brackets are percent-encoded), so a template with them matches nothing.
    let never = |c: char| "?#<>".contains(c) || c.is_whitespace() || c.is_control();
    if let Some(c) = path.chars().find(|&c| never(c)) {
        let hint = match c {
            '?' | '#' => "; routes match the path only, without a query or fragment",
            '<' | '>' => "; parameters are written `{id}`",
            _ => "",
        };
        return Err(format!(
            "{c:?} never appears in a request path, so this route would match nothing{hint}"
        ));
    }
    Ok(())
}

/// The router's spelling of a segment in another router's syntax: `:id` is `{id}`, `*rest`
/// is `{*rest}` (a bare `*` becomes `{*rest}`).
fn respelled(seg: &str) -> Option<String> {
    if let Some(name) = seg.strip_prefix(':').filter(|n| is_name(n)) {
        return Some(format!("{{{name}}}"));
    }
    let name = seg
        .strip_prefix('*')
        .filter(|n| n.is_empty() || is_name(n))?;
    Some(format!(
        "{{*{}}}",
        if name.is_empty() { "rest" } else { name }
    ))
}

fn check_segment(seg: &str, last: bool) -> Result<(), String> {
    let mut params = Vec::new();
    let mut chars = seg.char_indices().peekable();
    let mut open: Option<usize> = None;
    while let Some((at, c)) = chars.next() {
        match (c, open) {
            ('{', None) if chars.peek().is_some_and(|(_, n)| *n == '{') => drop(chars.next()),
            ('}', None) if chars.peek().is_some_and(|(_, n)| *n == '}') => drop(chars.next()),
            ('{', None) => open = Some(at),
            ('}', Some(start)) => {
                params.push(&seg[start + 1..at]);
                open = None;
            }
            ('{', Some(_)) | ('}', None) => return Err(unbalanced(seg)),
            _ => {}
        }
    }
    if open.is_some() {
        return Err(unbalanced(seg));
    }
    match params.as_slice() {
        [] => Ok(()),
        [name] => check_param(seg, name, last),
        _ => Err(format!(
            "`{seg}` has more than one parameter; the router takes one per segment"
        )),
    }
}

fn check_param(seg: &str, name: &str, last: bool) -> Result<(), String> {
    let (catch_all, bare) = match name.strip_prefix('*') {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    if !is_name(bare) {
        let hint = if catch_all { "{*rest}" } else { "{id}" };
        return Err(format!(
            "`{seg}`: parameter names are letters, digits, `_` and `-`, e.g. `{hint}`"
        ));
    }
    if !seg.ends_with('}') {
        return Err(format!(
            "`{seg}`: nothing may follow a parameter in its segment (`/files/{{name}}`, not `/files/{{name}}.json`)"
        ));
    }
    if catch_all && (!last || seg != format!("{{{name}}}")) {
        return Err(format!(
            "`{seg}`: a catch-all is a whole segment and the last one, e.g. `/files/{{*{bare}}}`"
        ));
    }
    Ok(())
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn unbalanced(seg: &str) -> String {
    format!("`{seg}` has unbalanced braces; parameters are `{{name}}`, catch-alls `{{*name}}`, literal braces `{{{{` and `}}}}`")
}

/// Our words for the router's refusal of a template that passed [`check`]; `method` names
/// the routes a conflict is with.
pub(crate) fn insert_error(e: matchit::InsertError, method: &http::Method, path: &str) -> String {
    match e {
        matchit::InsertError::Conflict { with } if with == path => {
            format!("duplicate route: `{method} {path}` is already configured")
        }
        matchit::InsertError::Conflict { with } => format!(
            "conflicts with `{method} {with}`: both match the same requests (a parameter in the same place under another name, or the same path spelled differently)"
        ),
        other => format!("the router refuses this template: {other}"),
    }
}

/// Parses a method name. Methods are case-sensitive (RFC 9110 §9.1), so `post` is not
/// `POST`: a lower-case spelling of a standard method is refused, since it would silently
/// cover nothing.
pub fn parse_method(name: &str) -> Result<Method, String> {
    let upper = name.to_ascii_uppercase();
    let standard = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    if name != upper && standard.contains(&upper.as_str()) {
        return Err(format!(
            "`{name}` is not a standard method; methods are case-sensitive (did you mean {upper}?)"
        ));
    }
    Method::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is not an HTTP method"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_syntax_is_accepted() {
        for ok in [
            "/payments",
            "/accounts/{id}/refunds",
            "/v{version}/payments",
            "/files/{*path}",
            "/a/{{literal}}",
            "/v1/things:batchCreate",
            "/a/{account_id}/{refund-id}",
            "/",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
            let mut router = matchit::Router::new();
            assert!(router.insert(ok, ()).is_ok(), "{ok} is matchit syntax");
        }
    }

    #[test]
    fn other_syntaxes_are_refused_with_the_right_spelling() {
        for (bad, hint) in [
            (
                "/accounts/:id/refunds",
                "did you mean `/accounts/{id}/refunds`?",
            ),
            ("/a/:a/b/:b", "did you mean `/a/{a}/b/{b}`?"),
            ("/files/*rest", "`{*rest}`"),
            ("/files/*", "`{*rest}`"),
            ("/a/{id", "unbalanced"),
            ("/a/id}", "unbalanced"),
            ("/a/{id}}", "unbalanced"),
            ("/a/{{id}", "unbalanced"),
            ("/a/{}", "`{id}`"),
            ("/a/{ id }", "`{id}`"),
            ("/a/{*}", "`{*rest}`"),
            ("/a/{id}.json", "nothing may follow"),
            ("/a/{x}{y}", "more than one parameter"),
            ("/files/{*path}/meta", "the last one"),
            ("/files/x{*path}", "whole segment"),
            ("/a?x=1", "without a query"),
            ("/a b", "match nothing"),
            ("/a/<id>", "`{id}`"),
            ("/a\tb", "match nothing"),
        ] {
            let err = check(bad).expect_err(bad);
            assert!(err.contains(hint), "{bad}: {err}");
        }
    }
}
