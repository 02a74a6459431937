//! What an upstream's answer does to its record: stored and replayed, released (the key may
//! run again) or failed (retries are refused). Every front door that classifies responses
//! (the tower layer, and the gateway through it) asks [`StatusRules::action`]; stores never
//! look at statuses.
//!
//! The rules are three lists of [`StatusPattern`]s per route, defaulted by
//! [`DEFAULT_RELEASE_STATUSES`], [`DEFAULT_FAIL_STATUSES`] and [`DEFAULT_STORE_STATUSES`]
//! (each documents why), and one rule that needs a response header: a `401` carrying
//! `WWW-Authenticate` releases the key unless a list names `401` exactly
//! ([`StatusRules::action`]).
//!
//! ```
//! use idemgate_core::status::{StatusAction, StatusPattern, StatusRules};
//!
//! let rules = StatusRules::default();
//! assert_eq!(rules.action(201, false), StatusAction::Store);
//! assert_eq!(rules.action(503, false), StatusAction::Release);
//! assert_eq!(rules.action(500, false), StatusAction::Fail);
//! // An authentication challenge: the request did not run; the retry after a refresh runs.
//! assert_eq!(rules.action(401, true), StatusAction::Release);
//! // A `401` without a challenge is the application's own answer: stored.
//! assert_eq!(rules.action(401, false), StatusAction::Store);
//! // A route that names `401` decides itself.
//! let store = [StatusPattern::Class(2), StatusPattern::Exact(401)];
//! let rules = StatusRules { store: &store, ..StatusRules::default() };
//! assert_eq!(rules.action(401, true), StatusAction::Store);
//! ```

/// A status code or a class of them: `503` or `5xx`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusPattern {
    /// One status code.
    Exact(u16),
    /// A class: `Class(5)` is `5xx`.
    Class(u8),
}

impl StatusPattern {
    /// Parses `"503"` or `"5xx"`.
    ///
    /// # Errors
    /// A message naming the bad value.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || format!("`{s}` is not a status code (100-599) or class (1xx-5xx)");
        // Bytes, not `&s[1..]`: a first character of two bytes (`"éx"`) is not a boundary.
        let b = s.as_bytes();
        if b.len() == 3 && b[1..].eq_ignore_ascii_case(b"xx") {
            let c = b[0];
            return match c {
                b'1'..=b'5' => Ok(Self::Class(c - b'0')),
                _ => Err(bad()),
            };
        }
        match s.parse::<u16>() {
            Ok(n @ 100..=599) => Ok(Self::Exact(n)),
            _ => Err(bad()),
        }
    }

    /// True when `status` matches.
    pub fn matches(self, status: u16) -> bool {
        match self {
            Self::Exact(n) => n == status,
            Self::Class(c) => status / 100 == u16::from(c),
        }
    }
}

impl std::fmt::Display for StatusPattern {
    /// As written in a configuration file: `503` or `5xx`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(n) => write!(f, "{n}"),
            Self::Class(c) => write!(f, "{c}xx"),
        }
    }
}

/// What an upstream status does to the record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusAction {
    /// Complete the record; retries get this response.
    Store,
    /// Delete the record: nothing was done, the same key may be retried.
    Release,
    /// Mark the record failed: it may have run, retries are refused.
    Fail,
}

/// Statuses stored and replayed by default: `2xx`, `3xx`, `4xx`.
///
/// - `2xx`: the operation ran; replaying its answer is the point of a key.
/// - `3xx`: a redirect is the operation's answer (`303 See Other` to what a `POST` created).
///   A `304` is kept as not replayable: it only answers a conditional `GET`/`HEAD` (RFC 9110
///   §15.4.5), so there is nothing to replay, but the operation may have run.
/// - `4xx`: the API looked at the request and refused it, possibly after doing some work (a
///   `402` after a declined charge, a `409` of its own); a retry of the same request gets the
///   same answer, never a run against state that changed since. Exceptions, by rule: the
///   `4xx` in [`DEFAULT_RELEASE_STATUSES`], and a `401` with `WWW-Authenticate`
///   ([`StatusRules::action`]).
pub const DEFAULT_STORE_STATUSES: [StatusPattern; 3] = [
    StatusPattern::Class(2),
    StatusPattern::Class(3),
    StatusPattern::Class(4),
];

/// Statuses that release the key by default: the request was not processed, so the same
/// key may run again. Checked before the fail and store lists.
///
/// - `408 Request Timeout`: the server gave up waiting for the request itself before
///   processing it (RFC 9110 §15.5.9).
/// - `425 Too Early`: the server refused to process a request sent in TLS early data
///   (RFC 8470 §5.2); the client is expected to repeat it.
/// - `429 Too Many Requests`: a rate limit refused it before it ran (RFC 6585 §4).
/// - `503 Service Unavailable`: the server could not handle it now (overload, maintenance;
///   RFC 9110 §15.6.4) and answered before doing the work. An API that answers `503` after
///   doing part of the work must list `503` in its fail statuses instead.
///
/// Besides the list: a `401` with `WWW-Authenticate` is released, and a `1xx` given as the
/// answer fails the key whatever the lists say ([`StatusRules::action`]).
pub const DEFAULT_RELEASE_STATUSES: [StatusPattern; 4] = [
    StatusPattern::Exact(408),
    StatusPattern::Exact(425),
    StatusPattern::Exact(429),
    StatusPattern::Exact(503),
];

/// Statuses that fail the key by default: `5xx` (but `503`, released first).
///
/// A server error may come after the operation ran, wholly or in part: running it again
/// could charge twice, and replaying the error would hide that it may have happened. So
/// retries get `previous-attempt-failed` and the client checks the resource before it
/// starts a new operation with a new key.
pub const DEFAULT_FAIL_STATUSES: [StatusPattern; 1] = [StatusPattern::Class(5)];

/// The status lists of one route, in the order they are checked.
#[derive(Clone, Copy, Debug)]
pub struct StatusRules<'a> {
    /// Statuses that release the key. Checked first.
    pub release: &'a [StatusPattern],
    /// Statuses that fail the key.
    pub fail: &'a [StatusPattern],
    /// Statuses stored and replayed.
    pub store: &'a [StatusPattern],
}

impl Default for StatusRules<'static> {
    /// The default lists.
    fn default() -> Self {
        Self {
            release: &DEFAULT_RELEASE_STATUSES,
            fail: &DEFAULT_FAIL_STATUSES,
            store: &DEFAULT_STORE_STATUSES,
        }
    }
}

impl StatusRules<'_> {
    /// What an upstream answer with `status` does to the record. `challenge`: the answer
    /// carries a `WWW-Authenticate` field with a value (RFC 9110 §11.6.1).
    ///
    /// In order:
    /// 0. A `1xx` fails the key. An answer is what the operation returned as its last word;
    ///    interim responses (RFC 9110 §15.2) never get here, so a `1xx` here came after the
    ///    request was handed over: a `101 Switching Protocols` nobody asked for (the gateway
    ///    strips `Upgrade`), or an answer the operation should not have given. It may have
    ///    run, and it cannot be stored (a replay of `101` switches nothing), so it is never
    ///    run again.
    /// 1. A `401` with a challenge releases the key, unless a list names `401` exactly
    ///    (`Exact(401)`; a class such as `4xx` does not count). RFC 9110 §15.5.2 requires the
    ///    challenge of a real authentication failure, which is answered before the operation
    ///    runs; the client refreshes its credentials and retries with the same key (as
    ///    `docs/clients.md` tells it to), and that retry must run instead of getting the
    ///    stored `401` for the record's lifetime. A `401` without a challenge is no HTTP
    ///    authentication failure but the application's own answer, possibly after work was
    ///    done, so it follows the lists (stored by default).
    /// 2. A status in the release list: released.
    /// 3. A status in the fail list: failed.
    /// 4. A status in the store list: stored.
    /// 5. Anything else fails: it may have run, so it is never run again.
    pub fn action(&self, status: u16, challenge: bool) -> StatusAction {
        let named = |list: &[StatusPattern]| list.iter().any(|p| p.matches(status));
        let challenged = status == 401 && challenge && !self.names_exactly(401);
        if status < 200 {
            StatusAction::Fail
        } else if challenged || named(self.release) {
            StatusAction::Release
        } else if named(self.fail) {
            StatusAction::Fail
        } else if named(self.store) {
            StatusAction::Store
        } else {
            StatusAction::Fail
        }
    }

    /// The entries no answer can reach, as `(list, message)`: a pattern of a later list
    /// that an earlier list (checked first, see [`StatusRules::action`]) already matches
    /// in full, e.g. `503` in `fail_statuses` while the default `release_statuses` names
    /// `503` (the key would be released, and the operation run again). A class in a later
    /// list that an earlier list covers only in part is the intended shape (the default
    /// `fail_statuses = ["5xx"]` after `release_statuses = [.., "503"]`) and is kept.
    pub fn unreachable(&self) -> Vec<(&'static str, String)> {
        let lists = [
            ("release_statuses", self.release),
            ("fail_statuses", self.fail),
            ("store_statuses", self.store),
        ];
        let mut found = Vec::new();
        for (i, (name, list)) in lists.iter().enumerate() {
            for pattern in list.iter() {
                let earlier = lists[..i].iter().find(|(_, before)| {
                    before.iter().any(|b| match *pattern {
                        StatusPattern::Exact(code) => b.matches(code),
                        StatusPattern::Class(_) => b == pattern,
                    })
                });
                if let Some((before, _)) = earlier {
                    found.push((
                        *name,
                        format!(
                            "`{pattern}` is never reached: {before} (checked first) already \
                             matches it; remove it from one of the lists"
                        ),
                    ));
                }
            }
        }
        found
    }

    /// True when one of the lists names `status` itself (not only its class).
    fn names_exactly(&self, status: u16) -> bool {
        [self.release, self.fail, self.store]
            .iter()
            .flat_map(|list| list.iter())
            .any(|p| *p == StatusPattern::Exact(status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lists_reach_every_entry() {
        assert!(StatusRules::default().unreachable().is_empty());
    }

    #[test]
    fn an_entry_an_earlier_list_matches_is_unreachable() {
        let p = |v: &[&str]| -> Vec<StatusPattern> {
            v.iter().map(|s| StatusPattern::parse(s).unwrap()).collect()
        };
        // The advice "list 503 in fail_statuses" with the default release list: 503 would
        // still release the key, so the operation ran again.
        let (release, fail) = (DEFAULT_RELEASE_STATUSES, p(&["5xx", "503"]));
        let rules = StatusRules {
            release: &release,
            fail: &fail,
            store: &DEFAULT_STORE_STATUSES,
        };
        let found = rules.unreachable();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "fail_statuses");
        assert!(found[0].1.contains("`503`") && found[0].1.contains("release_statuses"));
        // A class named again later, and an exact code inside an earlier class.
        let (release, fail, store) = (p(&["5xx"]), p(&["502"]), p(&["2xx", "5xx"]));
        let rules = StatusRules {
            release: &release,
            fail: &fail,
            store: &store,
        };
        let names: Vec<_> = rules.unreachable().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["fail_statuses", "store_statuses"]);
    }

    #[test]
    fn default_rules_by_status() {
        let rules = StatusRules::default();
        for (s, want) in [
            (100, StatusAction::Fail),
            (101, StatusAction::Fail),
            (103, StatusAction::Fail),
            (201, StatusAction::Store),
            (302, StatusAction::Store),
            (304, StatusAction::Store),
            (400, StatusAction::Store),
            (401, StatusAction::Store),
            (404, StatusAction::Store),
            (408, StatusAction::Release),
            (425, StatusAction::Release),
            (429, StatusAction::Release),
            (500, StatusAction::Fail),
            (503, StatusAction::Release),
            (504, StatusAction::Fail),
        ] {
            assert_eq!(rules.action(s, false), want, "{s}");
        }
    }

    /// A `1xx` answer may follow a run: no list releases or stores it.
    #[test]
    fn a_1xx_answer_fails_whatever_the_lists_say() {
        let everything = [StatusPattern::Class(1)];
        let rules = StatusRules {
            release: &everything,
            fail: &[],
            store: &everything,
        };
        for s in [100, 101, 199] {
            assert_eq!(rules.action(s, false), StatusAction::Fail, "{s}");
        }
    }

    #[test]
    fn a_challenge_releases_only_a_401() {
        let rules = StatusRules::default();
        assert_eq!(rules.action(401, true), StatusAction::Release);
        for (s, want) in [(403, StatusAction::Store), (500, StatusAction::Fail)] {
            assert_eq!(rules.action(s, true), want, "{s} with a challenge");
        }
    }

    #[test]
    fn a_list_that_names_401_wins_over_the_challenge_rule() {
        let exact = [StatusPattern::Exact(401)];
        let store = [StatusPattern::Class(2), StatusPattern::Exact(401)];
        let fail = [StatusPattern::Class(5), StatusPattern::Exact(401)];
        let stored = StatusRules {
            store: &store,
            ..StatusRules::default()
        };
        assert_eq!(stored.action(401, true), StatusAction::Store);
        let failed = StatusRules {
            fail: &fail,
            ..StatusRules::default()
        };
        assert_eq!(failed.action(401, true), StatusAction::Fail);
        let released = StatusRules {
            release: &exact,
            ..StatusRules::default()
        };
        assert_eq!(released.action(401, false), StatusAction::Release);
        // A class is no explicit rule for 401: the challenge still releases it.
        let classes = [StatusPattern::Class(4), StatusPattern::Class(5)];
        let by_class = StatusRules {
            fail: &classes,
            ..StatusRules::default()
        };
        assert_eq!(by_class.action(401, true), StatusAction::Release);
        assert_eq!(by_class.action(401, false), StatusAction::Fail);
    }

    #[test]
    fn patterns_parse() {
        assert_eq!(StatusPattern::parse("5xx"), Ok(StatusPattern::Class(5)));
        assert_eq!(StatusPattern::parse("4XX"), Ok(StatusPattern::Class(4)));
        assert_eq!(StatusPattern::parse(" 418 "), Ok(StatusPattern::Exact(418)));
        for bad in ["6xx", "99", "600", "éx", "abc", ""] {
            assert!(StatusPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
