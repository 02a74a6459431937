//! Errors written for people: an error and its sources on one line, each message once.

use std::error::Error;

/// `e` and its sources on one line (`a: b: c`), each message once: a source whose text
/// an earlier message already shows (many drivers repeat their cause in their own
/// message, e.g. sqlx's and redis's I/O errors) is left out.
///
/// ```
/// #[derive(Debug, thiserror::Error)]
/// #[error("store unavailable")]
/// struct Outer(#[source] std::io::Error);
///
/// let e = Outer(std::io::Error::other("connection refused"));
/// assert_eq!(idemgate_core::report::error_text(&e), "store unavailable: connection refused");
/// ```
pub fn error_text(e: &(dyn Error + 'static)) -> String {
    let mut chain = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    join_chain(chain)
}

/// Joins messages with `: `, leaving out empty ones and each one a message already shown
/// contains.
pub fn join_chain(messages: impl IntoIterator<Item = String>) -> String {
    let mut out: Vec<String> = Vec::new();
    for m in messages {
        if m.is_empty() || out.iter().any(|shown| shown.contains(&m)) {
            continue;
        }
        out.push(m);
    }
    out.join(": ")
}
