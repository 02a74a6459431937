//! Host lists in store URLs, in libpq's syntax:
//! `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`. sqlx reads one host
//! and ignores `target_session_attrs`, so [`split`] turns such a URL into one single-host URL
//! per host, in the URL's order, and the session attribute the store keeps a host by.

/// Which server of the list the store keeps (`target_session_attrs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionAttrs {
    /// `read-write` or `primary` (the default: a store that writes needs the primary): a
    /// server in recovery (`pg_is_in_recovery()` true, a standby) is refused.
    Primary,
    /// `any`: the first server that accepts the connection, standby or not (a standby then
    /// refuses every write, and its reads may lag the primary's).
    Any,
}

/// A store URL split by host.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HostList {
    /// One single-host URL per host, in the URL's order, without `target_session_attrs`.
    /// They hold the URL's password, if any: never shown.
    pub(crate) urls: Vec<String>,
    /// The URL's `target_session_attrs`.
    pub(crate) attrs: SessionAttrs,
}

/// The query parameter libpq reads the session attribute from.
const TARGET_SESSION_ATTRS: &str = "target_session_attrs";

/// Splits `url` (`scheme://[userinfo@]host[:port][,host[:port]...][/path][?query]`) by host.
/// A URL with one host comes back as it was, without `target_session_attrs`.
///
/// # Errors
/// What is wrong, in words that never repeat the URL: an empty host in the list, a
/// `target_session_attrs` other than `read-write`, `primary` or `any`, or a host list in the
/// `host`, `hostaddr` or `port` parameters (list the hosts before the path instead).
pub(crate) fn split(url: &str) -> Result<HostList, String> {
    let (scheme, rest) = url.split_once("://").ok_or("expected scheme://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let (path, query, fragment) = split_tail(tail);
    let (query, attrs) = session_attrs(query)?;
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.len() > 1 && hosts.iter().any(|h| h.is_empty()) {
        return Err("empty host in the host list (expected host[:port],host[:port])".into());
    }
    let urls = hosts
        .iter()
        .map(|host| format!("{scheme}://{userinfo}{host}{path}{query}{fragment}"))
        .collect();
    Ok(HostList { urls, attrs })
}

/// `tail` (what follows the hosts) as path, `?query` and `#fragment`, each possibly empty.
fn split_tail(tail: &str) -> (&str, &str, &str) {
    let (rest, fragment) = tail.find('#').map_or((tail, ""), |i| tail.split_at(i));
    let (path, query) = rest.find('?').map_or((rest, ""), |i| rest.split_at(i));
    (path, query, fragment)
}

/// `query` (`""` or `?a=b&...`) without `target_session_attrs`, and the attribute it set.
fn session_attrs(query: &str) -> Result<(String, SessionAttrs), String> {
    let mut attrs = SessionAttrs::Primary;
    let mut kept = Vec::new();
    for pair in query.trim_start_matches('?').split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "" => {}
            TARGET_SESSION_ATTRS => attrs = parse_attrs(value)?,
            "host" | "hostaddr" | "port" if value.contains(',') || value.contains("%2C") => {
                return Err(format!(
                    "a list in `{key}=` is not supported: list the hosts before the path \
                     (postgres://user@h1:5432,h2:5433/db)"
                ));
            }
            _ => kept.push(pair),
        }
    }
    let query = match kept.is_empty() {
        true => String::new(),
        false => format!("?{}", kept.join("&")),
    };
    Ok((query, attrs))
}

fn parse_attrs(value: &str) -> Result<SessionAttrs, String> {
    match value {
        "read-write" | "primary" => Ok(SessionAttrs::Primary),
        "any" => Ok(SessionAttrs::Any),
        other => Err(format!(
            "{TARGET_SESSION_ATTRS}={other:?} is not supported: the store writes, so it needs \
             read-write or primary (the default), or any"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(url: &str) -> Vec<String> {
        split(url).unwrap().urls
    }

    #[test]
    fn one_url_per_host_in_order() {
        let list =
            split("postgres://u:pw@h1:5432,h2:5433/db?target_session_attrs=read-write").unwrap();
        assert_eq!(
            list.urls,
            ["postgres://u:pw@h1:5432/db", "postgres://u:pw@h2:5433/db"]
        );
        assert_eq!(list.attrs, SessionAttrs::Primary);
        assert_eq!(
            urls("postgresql://h1,[::1]:6432,h3/db?sslmode=require#x"),
            [
                "postgresql://h1/db?sslmode=require#x",
                "postgresql://[::1]:6432/db?sslmode=require#x",
                "postgresql://h3/db?sslmode=require#x",
            ]
        );
        assert_eq!(
            urls("postgres://h1:1,h2:2?target_session_attrs=primary&application_name=a"),
            [
                "postgres://h1:1?application_name=a",
                "postgres://h2:2?application_name=a"
            ]
        );
    }

    #[test]
    fn a_single_host_is_unchanged_but_for_the_attribute() {
        for url in [
            "postgres://app@db:5432/pay",
            "postgres://db",
            "postgres:///pay?host=/run",
        ] {
            assert_eq!(urls(url), [url]);
        }
        let list = split("postgres://db/pay?target_session_attrs=any&sslmode=disable").unwrap();
        assert_eq!(list.urls, ["postgres://db/pay?sslmode=disable"]);
        assert_eq!(list.attrs, SessionAttrs::Any);
    }

    #[test]
    fn what_is_wrong_is_named() {
        for (url, says) in [
            ("postgres://h1,,h2/db", "empty host"),
            ("postgres://h1:5432,/db", "empty host"),
            (
                "postgres://h1/db?target_session_attrs=read-only",
                "read-only",
            ),
            (
                "postgres://h1/db?target_session_attrs=standby",
                "needs read-write",
            ),
            ("postgres:///db?host=a,b", "`host=`"),
            ("postgres://a/db?port=1%2C2", "`port=`"),
        ] {
            let err = split(url).unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
        }
    }
}
