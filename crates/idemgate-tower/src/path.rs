//! Request paths as an upstream reads them: the normal form routes are matched and scoped
//! by, and the spellings servers disagree on.
//!
//! `POST /charges`, `POST /%63harges` and `POST //charges` reach one handler in many
//! frameworks; scoped by their spelling, they would be three records for one operation, and
//! one key could run it three times. So a covered request's path is first brought to its
//! normal form (RFC 3986 §6.2.2):
//!
//! - percent-encoded unreserved characters (`ALPHA DIGIT - . _ ~`, §2.3) are decoded
//!   (`%63` → `c`, `%7e` → `~`), §6.2.2.2;
//! - the remaining escapes are written in upper case (`%2f` → `%2F`), §6.2.2.1;
//!
//! and the spellings that servers read in different ways are refused
//! ([`PathAmbiguity`]): empty segments (`//`), dot segments (`.` and `..`, also encoded as
//! `%2E`; RFC 3986 §6.2.2.3 would remove them, but Go's `ServeMux` redirects to the cleaned
//! path while Werkzeug and Express route them as literal segments, so the gateway cannot
//! tell which resource they name), `\` (raw or `%5C`; some servers read it as `/`), NUL
//! (`%00`), `;params` (Tomcat and Spring strip them, others keep them) and a `%` not
//! followed by two hex digits. An encoded `/` (`%2F`) and a trailing `/` are reported
//! ([`NormalPath::encoded_slash`], [`NormalPath::trailing_slash`]) for the route's settings
//! to decide ([`EncodedSlash`], [`TrailingSlash`]).
//!
//! A path that is already in normal form comes back as it was sent, borrowed.
//!
//! ```
//! use idemgate_tower::path::{normalise, PathAmbiguity};
//!
//! assert_eq!(normalise("/%63harges").unwrap().as_str(), "/charges");
//! assert_eq!(normalise("/a%2fb").unwrap().as_str(), "/a%2Fb");
//! assert_eq!(normalise("//charges").unwrap_err(), PathAmbiguity::EmptySegment);
//! assert_eq!(normalise("/charges;x=1").unwrap_err(), PathAmbiguity::Params);
//! ```

use std::borrow::Cow;
use std::fmt;

mod settings;

pub use settings::{EncodedSlash, ForwardPath, TrailingSlash, Unmatched};

/// Why a path is refused: a spelling that servers read in different ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathAmbiguity {
    /// The path does not start with `/` (e.g. `*`, or an empty path).
    NotAbsolute,
    /// An empty segment: `//`.
    EmptySegment,
    /// A `.` or `..` segment, raw or encoded (`%2E`).
    DotSegment,
    /// An encoded `/` (`%2F`), on a route with [`EncodedSlash::Refuse`].
    EncodedSlash,
    /// A `\`, raw or encoded (`%5C`).
    Backslash,
    /// An encoded NUL (`%00`).
    Nul,
    /// A `;` (path parameters, `/charges;x=1`).
    Params,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A trailing `/` that a route's template does not have (or the reverse), on a route
    /// with [`TrailingSlash::Refuse`]; for a path that matches no route, any trailing `/`
    /// under the default route's `Refuse`.
    TrailingSlash,
}

impl fmt::Display for PathAmbiguity {
    /// What the path holds, e.g. "an empty segment (`//`)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotAbsolute => "no leading `/`",
            Self::EmptySegment => "an empty segment (`//`)",
            Self::DotSegment => "a dot segment (`.` or `..`, possibly encoded as `%2E`)",
            Self::EncodedSlash => "an encoded slash (`%2F`)",
            Self::Backslash => "a backslash (`\\` or `%5C`)",
            Self::Nul => "an encoded NUL (`%00`)",
            Self::Params => "path parameters (`;`)",
            Self::BadEscape => "a `%` that is not followed by two hex digits",
            Self::TrailingSlash => {
                "a trailing slash where the route has none, or none where it has one"
            }
        })
    }
}

impl std::error::Error for PathAmbiguity {}

/// A path in normal form (see the [module docs](self)), with what is left for the route's
/// settings to decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NormalPath<'p> {
    path: Cow<'p, str>,
    encoded_slash: bool,
}

impl<'p> NormalPath<'p> {
    /// The normal form, e.g. `/charges` for `/%63harges`.
    pub fn as_str(&self) -> &str {
        &self.path
    }

    /// The normal form, owned or borrowed from the path as sent.
    pub fn into_cow(self) -> Cow<'p, str> {
        self.path
    }

    /// Whether the path holds an encoded `/` (`%2F`) inside a segment.
    pub fn encoded_slash(&self) -> bool {
        self.encoded_slash
    }

    /// Whether the path ends with `/` and is not `/` itself.
    pub fn trailing_slash(&self) -> bool {
        self.path.len() > 1 && self.path.ends_with('/')
    }
}

/// Brings `path` (a request's path, without its query) to its normal form.
///
/// # Errors
/// The [`PathAmbiguity`] of the first spelling that servers read in different ways; an
/// encoded `/` and a trailing `/` are not errors here (see [`NormalPath`]).
pub fn normalise(path: &str) -> Result<NormalPath<'_>, PathAmbiguity> {
    let rest = path.strip_prefix('/').ok_or(PathAmbiguity::NotAbsolute)?;
    let mut out: Option<String> = None;
    let mut encoded_slash = false;
    // Where the current segment starts in `path`.
    let mut start = 1;
    let mut segments = rest.split('/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        if segment.is_empty() && !last {
            return Err(PathAmbiguity::EmptySegment);
        }
        let normal = segment_normal_form(segment, &mut encoded_slash)?;
        if normal == "." || normal == ".." {
            return Err(PathAmbiguity::DotSegment);
        }
        match (&mut out, normal) {
            (Some(out), normal) => {
                out.push('/');
                out.push_str(&normal);
            }
            (None, Cow::Borrowed(_)) => {}
            (None, Cow::Owned(normal)) => {
                // The segments before this one were in normal form: copy them as sent.
                let mut s = String::with_capacity(path.len());
                s.push_str(&path[..start]);
                s.push_str(&normal);
                out = Some(s);
            }
        }
        start += segment.len() + 1;
    }
    Ok(NormalPath {
        path: out.map_or(Cow::Borrowed(path), Cow::Owned),
        encoded_slash,
    })
}

/// One segment in normal form: unreserved escapes decoded, others in upper case.
fn segment_normal_form<'s>(
    segment: &'s str,
    encoded_slash: &mut bool,
) -> Result<Cow<'s, str>, PathAmbiguity> {
    let bytes = segment.as_bytes();
    let mut out: Option<String> = None;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b';' => return Err(PathAmbiguity::Params),
            b'\\' => return Err(PathAmbiguity::Backslash),
            b'%' => {
                let (hi, lo) = match (bytes.get(i + 1), bytes.get(i + 2)) {
                    (Some(&hi), Some(&lo)) => (hex(hi)?, hex(lo)?),
                    _ => return Err(PathAmbiguity::BadEscape),
                };
                let byte = hi << 4 | lo;
                match byte {
                    0 => return Err(PathAmbiguity::Nul),
                    b'\\' => return Err(PathAmbiguity::Backslash),
                    b'/' => *encoded_slash = true,
                    _ => {}
                }
                let as_sent = &segment[i..i + 3];
                if is_unreserved(byte) {
                    out.get_or_insert_with(|| segment[..i].to_owned())
                        .push(char::from(byte));
                } else if as_sent.bytes().any(|b| b.is_ascii_lowercase()) {
                    out.get_or_insert_with(|| segment[..i].to_owned())
                        .push_str(&as_sent.to_ascii_uppercase());
                } else if let Some(out) = &mut out {
                    out.push_str(as_sent);
                }
                i += 3;
                continue;
            }
            _ => {}
        }
        // Copy the run up to the next byte that needs a look.
        let end = bytes[i..]
            .iter()
            .position(|b| matches!(b, b';' | b'\\' | b'%'))
            .map_or(bytes.len(), |n| i + n);
        if let Some(out) = &mut out {
            out.push_str(&segment[i..end]);
        }
        i = end;
    }
    Ok(out.map_or(Cow::Borrowed(segment), Cow::Owned))
}

fn hex(b: u8) -> Result<u8, PathAmbiguity> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        b'A'..=b'F' => Ok(b - b'A' + 10),
        _ => Err(PathAmbiguity::BadEscape),
    }
}

/// RFC 3986 §2.3: `ALPHA / DIGIT / "-" / "." / "_" / "~"`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `path` (in normal form) with its ASCII letters in lower case, escapes left as they are
/// (`/Group%2FA` → `/group%2FA`): the spelling case-insensitive routes match.
pub fn fold_case(path: &str) -> Cow<'_, str> {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => i += 3,
            b if b.is_ascii_uppercase() => break,
            _ => i += 1,
        }
    }
    if i >= bytes.len() {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    out.push_str(&path[..i]);
    let mut escape = 0;
    for c in path[i..].chars() {
        if escape > 0 {
            escape -= 1;
            out.push(c);
        } else if c == '%' {
            escape = 2;
            out.push(c);
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    Cow::Owned(out)
}

/// `path` with a trailing `/` removed, or one added when it has none; `None` for `/`.
pub(crate) fn toggle_trailing_slash(path: &str) -> Option<Cow<'_, str>> {
    match path.strip_suffix('/') {
        Some("") => None,
        Some(stripped) => Some(Cow::Borrowed(stripped)),
        None => Some(Cow::Owned(format!("{path}/"))),
    }
}

#[cfg(test)]
mod tests;
