//! Strict parsing of header values of the form `value *( OWS ";" OWS name=value )`: media
//! types (RFC 9110 §8.3.1, §5.6.6) and `Content-Disposition` (RFC 6266 §4.1, RFC 7578 §4.2).
//!
//! Anything a lenient parser could read another way is refused (`None`), and the caller then
//! hashes the bytes as received: a parameter without `=`, whitespace around `=`, a quoted
//! string holding a backslash (RFC quoted-pairs, which browsers never send and many parsers
//! do not unescape), a control character, or a parameter named twice.

/// A parsed header value: the lower-cased leading value (`type/subtype`, or a disposition
/// type) and its parameters sorted by lower-cased name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Params {
    /// `type/subtype` or the disposition type, lower-cased.
    pub(crate) value: String,
    /// (lower-cased name, value as written without its quotes), sorted by name.
    pub(crate) params: Vec<(String, Vec<u8>)>,
}

impl Params {
    /// The value of parameter `name` (lower-case).
    pub(crate) fn get(&self, name: &str) -> Option<&[u8]> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Whether `charset` is absent or UTF-8 (any case): the reading canonical forms assume.
    pub(crate) fn utf8_or_no_charset(&self) -> bool {
        self.get("charset")
            .is_none_or(|c| c.eq_ignore_ascii_case(b"utf-8"))
    }

    /// A length-prefixed encoding of the value and the parameters, leaving out those for
    /// which `skip(name, value)` holds. `charset` values are compared without case
    /// (RFC 2046 §4.1.2); every other value byte for byte.
    pub(crate) fn encode(&self, skip: impl Fn(&str, &[u8]) -> bool) -> Vec<u8> {
        let mut out = Vec::new();
        push(&mut out, self.value.as_bytes());
        for (name, value) in self.params.iter().filter(|(n, v)| !skip(n, v)) {
            push(&mut out, name.as_bytes());
            if name == "charset" {
                push(&mut out, &value.to_ascii_lowercase());
            } else {
                push(&mut out, value);
            }
        }
        out
    }
}

/// Appends `bytes` with its length (u64, big-endian) in front.
pub(crate) fn push(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// RFC 9110 §5.6.2 `tchar`.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

/// Parses a media type: `type/subtype` (tokens) and its parameters.
pub(crate) fn media_type(raw: &[u8]) -> Option<Params> {
    let p = parse(raw)?;
    let (t, s) = p.value.split_once('/')?;
    (is_token(t.as_bytes()) && is_token(s.as_bytes())).then_some(p)
}

/// Parses a disposition (`form-data; name="a"`): a token and its parameters.
pub(crate) fn disposition(raw: &[u8]) -> Option<Params> {
    let p = parse(raw)?;
    is_token(p.value.as_bytes()).then_some(p)
}

fn parse(raw: &[u8]) -> Option<Params> {
    let raw = raw.trim_ascii();
    let end = raw.iter().position(|&b| b == b';').unwrap_or(raw.len());
    let value = raw[..end].trim_ascii();
    if !value.iter().all(|&b| is_tchar(b) || b == b'/') {
        return None;
    }
    let mut params: Vec<(String, Vec<u8>)> = Vec::new();
    let mut rest = &raw[end..];
    while let Some(after) = rest.strip_prefix(b";") {
        let after = after.trim_ascii_start();
        if after.is_empty() || after[0] == b';' {
            rest = after; // empty parameter, allowed by the grammar
            continue;
        }
        let (name, value, tail) = parameter(after)?;
        if params.iter().any(|(n, _)| *n == name) {
            return None;
        }
        params.push((name, value));
        rest = tail.trim_ascii_start();
    }
    if !rest.is_empty() {
        return None;
    }
    params.sort();
    Some(Params {
        value: String::from_utf8(value.to_ascii_lowercase()).ok()?,
        params,
    })
}

/// `name=token` or `name="quoted"`, then what follows it.
fn parameter(s: &[u8]) -> Option<(String, Vec<u8>, &[u8])> {
    let eq = s.iter().position(|&b| b == b'=')?;
    let name = &s[..eq];
    if !is_token(name) {
        return None;
    }
    // RFC 2231 / RFC 8187 extended and continued parameters (`boundary*`, `name*0`) are read
    // in place of, or joined with, the plain ones by some parsers and not by others (RFC 7578
    // §4.2 forbids them in form data): refused, so the value is hashed as received.
    if name.contains(&b'*') {
        return None;
    }
    let name = String::from_utf8(name.to_ascii_lowercase()).ok()?;
    let s = &s[eq + 1..];
    if let Some(q) = s.strip_prefix(b"\"") {
        let close = q.iter().position(|&b| b == b'"')?;
        let value = &q[..close];
        // qdtext (RFC 9110 §5.6.4) without quoted-pairs: HTAB, SP, visible ASCII, obs-text.
        let ok = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f && b != b'\\');
        value
            .iter()
            .all(|&b| ok(b))
            .then(|| (name, value.to_vec(), &q[close + 1..]))
    } else {
        let end = s.iter().position(|&b| !is_tchar(b)).unwrap_or(s.len());
        let (value, tail) = s.split_at(end);
        is_token(value).then(|| (name, value.to_vec(), tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_normalised_and_sorted() {
        let a = media_type(b"Multipart/Form-Data; Boundary=\"x y\";charset=UTF-8").unwrap();
        assert_eq!(a.value, "multipart/form-data");
        assert_eq!(
            a.params,
            vec![
                ("boundary".into(), b"x y".to_vec()),
                ("charset".into(), b"UTF-8".to_vec())
            ]
        );
        let b = media_type(b"multipart/form-data;charset=utf-8 ; boundary=\"x y\"").unwrap();
        assert_eq!(a.encode(|_, _| false), b.encode(|_, _| false));
        assert_ne!(
            a.encode(|_, _| false),
            media_type(b"multipart/form-data; boundary=\"x Y\"; charset=utf-8")
                .unwrap()
                .encode(|_, _| false)
        );
        assert_eq!(
            media_type(b"text/plain; a=b;").unwrap().get("a"),
            Some(&b"b"[..])
        );
    }

    #[test]
    fn anything_ambiguous_is_refused() {
        for bad in [
            &b"text"[..],
            b"text/",
            b"text/plain; a",
            b"text/plain; a = b",
            b"text/plain; a=\"b",
            b"text/plain; a=\"b\\\"c\"",
            b"text/plain; a=b; A=c",
            b"text/plain; a=b c",
            b"text/plain; a=b\x01",
            b"text/plain, text/html",
            b"te xt/plain",
        ] {
            assert_eq!(media_type(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(disposition(b"form-data; name=a; name=b"), None);
        for extended in [
            &b"multipart/form-data; boundary=XX; boundary*=utf-8''YY"[..],
            b"multipart/form-data; boundary*0=XX; boundary*1=YY",
        ] {
            assert_eq!(media_type(extended), None);
        }
        assert_eq!(
            disposition(b"form-data; name=\"amount\"; name*=utf-8''fee"),
            None
        );
        assert_eq!(disposition(b"form-data; name=a; filename*=utf-8''b"), None);
        assert!(disposition(b"form-data; name=\"a b\"; filename=\"\xc3\xa9.txt\"").is_some());
    }
}
