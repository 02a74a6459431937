//! Request paths as an upstream reads them: the normal form routes are matched and scoped
//! by, and the spellings servers disagree on.
//!
//! `POST /charges`, `POST /%63harges` and `POST //charges` reach one handler in many
//! frameworks, and so do `/users/a@b` and `/users/a%40b`: Werkzeug, Express (for its
//! parameters) and Go's `ServeMux` decode the path before they route it. Scoped by their
//! spelling, they would be separate records for one operation, and one key could run it
//! again. So a covered request's path is first brought to its normal form (RFC 3986
//! §6.2.2), where each byte has one spelling, whether it was sent raw or as an escape:
//!
//! - an escape of a character that RFC 3986 §3.3 allows raw in a segment with the same
//!   meaning (`pchar`: unreserved `ALPHA DIGIT - . _ ~`, the sub-delims `! $ & ' ( ) * + ,
//!   =`, `:` and `@`; not `;`) is decoded: `%63` → `c`, `%40` → `@`, `%3A` → `:`
//!   (§6.2.2.2);
//! - every other byte is an escape in upper case (§6.2.2.1), also when it was sent raw:
//!   `%2f` → `%2F`, `{` → `%7B`, `é` → `%C3%A9`. These are the bytes whose raw form means
//!   something else (`/`, `%`, `;`, `?`, `#`) or may not appear raw in a URI (space,
//!   controls, `"`, `<`, `>`, `[`, `]`, `^`, `` ` ``, `{`, `|`, `}`, DEL, bytes ≥ 0x80):
//!   the normal form is an RFC 3986 path, forwarded as the request target under
//!   [`ForwardPath::Normalised`].
//!
//! The spellings that servers read in different ways are refused ([`PathAmbiguity`]): empty
//! segments (`//`), dot segments (`.` and `..`, also encoded as `%2E`; RFC 3986 §6.2.2.3
//! would remove them, but Go's `ServeMux` redirects to the cleaned path while Werkzeug and
//! Express route them as literal segments, so the gateway cannot tell which resource they
//! name), `\` (raw or `%5C`; some servers read it as `/`), NUL (`%00`), `;params` (Tomcat
//! and Spring strip them, others keep them), a `%` not followed by two hex digits, and
//! bytes ≥ 0x80 that are not UTF-8 (`%C0%AF`, `%FF`: RFC 3629 §4; servers replace, re-read
//! or refuse them). An encoded `/` (`%2F`) and a trailing `/` are reported
//! ([`NormalPath::encoded_slash`], [`NormalPath::trailing_slash`]) for the route's settings
//! to decide ([`EncodedSlash`], [`TrailingSlash`]).
//!
//! A path that is already in normal form comes back as it was sent, borrowed.
//!
//! ```
//! use idemgate_tower::path::{normalise, PathAmbiguity};
//!
//! assert_eq!(normalise("/%63harges").unwrap().as_str(), "/charges");
//! assert_eq!(normalise("/users/a%40b").unwrap().as_str(), "/users/a@b");
//! assert_eq!(normalise("/caf\u{e9}").unwrap().as_str(), "/caf%C3%A9");
//! assert_eq!(normalise("/a%2fb").unwrap().as_str(), "/a%2Fb");
//! assert_eq!(normalise("//charges").unwrap_err(), PathAmbiguity::EmptySegment);
//! assert_eq!(normalise("/charges;x=1").unwrap_err(), PathAmbiguity::Params);
//! assert_eq!(normalise("/%C0%AF").unwrap_err(), PathAmbiguity::InvalidUtf8);
//! ```

use std::borrow::Cow;
use std::fmt;

mod escape;
mod settings;

use escape::segment_normal_form;
pub(crate) use escape::text_normal_form;
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
    /// Bytes ≥ 0x80 (raw or escaped) that are not UTF-8 (RFC 3629 §4): `%FF`, the overlong
    /// `%C0%AF`, a surrogate, a sequence cut short.
    InvalidUtf8,
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
            Self::InvalidUtf8 => "escapes that are not UTF-8 (e.g. `%FF` or `%C0%AF`)",
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

/// `path` (in normal form) with its ASCII letters in lower case, escapes left as they are
/// (`/Group%2FA` → `/group%2FA`): the spelling case-insensitive routes match.
pub fn fold_case(path: &str) -> Cow<'_, str> {
    let (mut out, mut escape) = (None::<String>, 0);
    for (i, c) in path.char_indices() {
        let folded = match c {
            _ if escape > 0 => {
                escape -= 1;
                c
            }
            '%' => {
                escape = 2;
                c
            }
            _ => c.to_ascii_lowercase(),
        };
        if folded != c && out.is_none() {
            out = Some(path[..i].to_owned());
        }
        if let Some(out) = &mut out {
            out.push(folded);
        }
    }
    out.map_or(Cow::Borrowed(path), Cow::Owned)
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
