//! One segment in normal form: which bytes are written raw and which as escapes (RFC 3986
//! §2.1, §2.2, §2.3, §3.3, §6.2.2.1, §6.2.2.2), and the UTF-8 check of bytes ≥ 0x80.
//!
//! A byte is spelled one way only, whether it was sent raw or as an escape:
//!
//! - raw when RFC 3986 §3.3 lets it appear raw in a segment with the meaning of its escape:
//!   `pchar` (`unreserved / sub-delims / ":" / "@"`) except `;`, whose raw form starts path
//!   parameters (and is refused). Routers decode the path before matching (Werkzeug,
//!   Express's parameters, Go's `ServeMux`), so `%40` and `@` name one resource;
//! - otherwise as an upper-case escape (§6.2.2.1): `%2F`, `%25`, `%3B`, `%3F`, `%23`,
//!   space, controls, `"`, `<`, `>`, `[`, `]`, `^`, `` ` ``, `{`, `|`, `}`, DEL, and every
//!   byte ≥ 0x80 (raw UTF-8 `é` becomes `%C3%A9`), so the normal form is an RFC 3986 path
//!   that can be forwarded as the request target.
//!
//! Bytes ≥ 0x80 must spell UTF-8 (RFC 3629 §4, no overlong forms or surrogates): servers
//! read other bytes differently (replacement characters, Latin-1, a `400`), so `%C0%AF` or
//! `%FF` is refused ([`PathAmbiguity::InvalidUtf8`]).

use std::borrow::Cow;
use std::fmt::Write;

use super::PathAmbiguity;

/// One segment in normal form; `encoded_slash` is set when it holds `%2F`.
pub(super) fn segment_normal_form<'s>(
    segment: &'s str,
    encoded_slash: &mut bool,
) -> Result<Cow<'s, str>, PathAmbiguity> {
    let bytes = segment.as_bytes();
    let mut out: Option<String> = None;
    let mut utf8 = Utf8::default();
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes[i] == b'%';
        let (byte, len) = if escaped {
            (unescape(bytes.get(i + 1..i + 3))?, 3)
        } else {
            (bytes[i], 1)
        };
        refuse_or_note(byte, escaped, encoded_slash)?;
        utf8.push(byte)?;
        let raw = stays_raw(byte);
        let as_normal = if raw {
            !escaped
        } else {
            escaped && !bytes[i + 1..i + 3].iter().any(u8::is_ascii_lowercase)
        };
        if !as_normal && out.is_none() {
            // `i` starts a character: a raw byte ≥ 0x80 is never in normal form, so the
            // first one of a character gets here.
            out = Some(segment[..i].to_owned());
        }
        if let Some(out) = &mut out {
            if raw {
                out.push(char::from(byte));
            } else {
                push_escape(out, byte);
            }
        }
        i += len;
    }
    utf8.end()?;
    Ok(out.map_or(Cow::Borrowed(segment), Cow::Owned))
}

/// Literal text of a route template (no parameters) in normal form, segment by segment.
pub(crate) fn text_normal_form(text: &str) -> Result<String, PathAmbiguity> {
    let mut slash = false;
    let segments: Result<Vec<_>, _> = text
        .split('/')
        .map(|s| segment_normal_form(s, &mut slash))
        .collect();
    Ok(segments?.join("/"))
}

/// RFC 3986 §3.3 `pchar` without `;` and escapes: `ALPHA DIGIT - . _ ~` (§2.3),
/// `! $ & ' ( ) * + , =` (§2.2), `:` and `@`.
pub(super) fn stays_raw(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,=:@".contains(&b)
}

/// The refusals a single byte decides, and the note of an encoded `/`.
fn refuse_or_note(byte: u8, escaped: bool, encoded_slash: &mut bool) -> Result<(), PathAmbiguity> {
    match byte {
        b';' if !escaped => Err(PathAmbiguity::Params),
        b'\\' => Err(PathAmbiguity::Backslash),
        0 => Err(PathAmbiguity::Nul),
        b'/' => {
            *encoded_slash = true;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The byte of the two hex digits after a `%`.
fn unescape(digits: Option<&[u8]>) -> Result<u8, PathAmbiguity> {
    let hex = <[u8; 1] as hex::FromHex>::from_hex(digits.unwrap_or_default());
    hex.map(|[byte]| byte).map_err(|_| PathAmbiguity::BadEscape)
}

fn push_escape(out: &mut String, byte: u8) {
    // Writing to a `String` never fails.
    let _ = write!(out, "%{byte:02X}");
}

/// The UTF-8 sequence being read, byte by byte (raw or decoded), RFC 3629 §4.
#[derive(Default)]
struct Utf8 {
    buf: [u8; 4],
    len: usize,
    need: usize,
}

impl Utf8 {
    fn push(&mut self, b: u8) -> Result<(), PathAmbiguity> {
        if self.need == 0 {
            self.need = match b {
                0x00..=0x7F => return Ok(()),
                0xC2..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF4 => 4,
                _ => return Err(PathAmbiguity::InvalidUtf8),
            };
            self.buf[0] = b;
            self.len = 1;
            return Ok(());
        }
        if b & 0xC0 != 0x80 {
            return Err(PathAmbiguity::InvalidUtf8);
        }
        self.buf[self.len] = b;
        self.len += 1;
        if self.len == self.need {
            // Overlong forms, surrogates and code points past U+10FFFF.
            std::str::from_utf8(&self.buf[..self.len]).map_err(|_| PathAmbiguity::InvalidUtf8)?;
            self.need = 0;
        }
        Ok(())
    }

    /// A segment ends inside no sequence.
    fn end(&self) -> Result<(), PathAmbiguity> {
        match self.need {
            0 => Ok(()),
            _ => Err(PathAmbiguity::InvalidUtf8),
        }
    }
}
