//! Canonical form of a `multipart/form-data` body (RFC 7578, RFC 2046 §5.1.1): its parts in
//! order, each as its normalised headers and its content, without the boundary, the preamble
//! or the epilogue, so a client that picks a new boundary for each retry (curl does) sends
//! the same request.
//!
//! The parse is strict, because two bodies with one canonical form must be read alike by
//! every parser an upstream may use. It refuses (`None`, and the body is hashed as received):
//! a boundary outside RFC 2046's alphabet or longer than 70 characters; any occurrence of
//! `--boundary` that is not at the start of the body or right after a CRLF, or that is not
//! followed by CRLF or `--` (transport padding included); a missing close delimiter or one
//! followed by anything but the end or CRLF; header lines not ending in CRLF, folded, with a
//! control character, a name that is not a token, or a name given twice in one part; a part
//! without a `Content-Disposition: form-data` that has a `name`; a part `Content-Type` or
//! `Content-Disposition` that [`super::media`] refuses.

use memchr::memmem;

use super::media::{self, push};

/// The canonical form of `body` split by `boundary`, or `None` if it does not parse strictly.
pub(crate) fn canonical_form_data(body: &[u8], boundary: &[u8]) -> Option<Vec<u8>> {
    if !valid_boundary(boundary) {
        return None;
    }
    let mut delimiter = b"--".to_vec();
    delimiter.extend_from_slice(boundary);
    let at = delimiters(body, &delimiter)?;
    let mut parts = Vec::new();
    for (i, &start) in at.iter().enumerate() {
        let after = &body[start + delimiter.len()..];
        if let Some(tail) = after.strip_prefix(b"--") {
            // The close delimiter: the last occurrence, then the end or CRLF and an epilogue.
            let last = i + 1 == at.len();
            return (last && (tail.is_empty() || tail.starts_with(b"\r\n")))
                .then(|| encode(&parts));
        }
        let next = *at.get(i + 1)?;
        if !after.starts_with(b"\r\n") {
            return None;
        }
        // The part runs from after the CRLF to the CRLF that opens the next delimiter.
        let part = body.get(start + delimiter.len() + 2..next - 2)?;
        parts.push(parse_part(part)?);
    }
    None
}

/// RFC 2046 §5.1.1: 1 to 70 `bchars`, not ending in a space.
fn valid_boundary(b: &[u8]) -> bool {
    let bchar = |c: u8| c.is_ascii_alphanumeric() || b"'()+_,-./:=? ".contains(&c);
    (1..=70).contains(&b.len()) && b.iter().all(|&c| bchar(c)) && !b.ends_with(b" ")
}

/// Every position where `delimiter` occurs, overlapping ones included; `None` if one is not
/// at the start of the body or after a CRLF, or if there is none.
fn delimiters(body: &[u8], delimiter: &[u8]) -> Option<Vec<usize>> {
    let finder = memmem::Finder::new(delimiter);
    let mut at = Vec::new();
    let mut from = 0;
    while let Some(i) = finder.find(&body[from..]).map(|i| i + from) {
        if i != 0 && !body[..i].ends_with(b"\r\n") {
            return None;
        }
        at.push(i);
        from = i + 1;
    }
    (!at.is_empty()).then_some(at)
}

/// One part: (lower-cased header name, normalised value) sorted by name, and the content.
type Part<'a> = (Vec<(String, Vec<u8>)>, &'a [u8]);

fn parse_part(part: &[u8]) -> Option<Part<'_>> {
    let end = memmem::find(part, b"\r\n\r\n")?;
    let (head, content) = (&part[..end], &part[end + 4..]);
    let mut headers: Vec<(String, Vec<u8>)> = Vec::new();
    for line in lines(head) {
        let (name, value) = header_line(line)?;
        if headers.iter().any(|(n, _)| *n == name) {
            return None;
        }
        let value = match name.as_str() {
            "content-disposition" => {
                let d = media::disposition(value)?;
                (d.value == "form-data" && d.get("name").is_some()).then_some(())?;
                d.encode(|_, _| false)
            }
            "content-type" => media::media_type(value)?.encode(|_, _| false),
            _ => value.to_vec(),
        };
        headers.push((name, value));
    }
    headers
        .iter()
        .any(|(n, _)| n == "content-disposition")
        .then_some(())?;
    headers.sort();
    Some((headers, content))
}

/// The CRLF-separated lines of `head` (a bare CR or LF stays in its line, to be refused).
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(head);
    std::iter::from_fn(move || {
        let r = rest?;
        match memmem::find(r, b"\r\n") {
            Some(i) => {
                rest = Some(&r[i + 2..]);
                Some(&r[..i])
            }
            None => rest.take(),
        }
    })
}

/// `name: value` with a token name and a value of visible ASCII, SP, HTAB and obs-text.
fn header_line(line: &[u8]) -> Option<(String, &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| media::is_tchar(b)) {
        return None; // also refuses folded lines (leading whitespace)
    }
    let value = line[colon + 1..].trim_ascii();
    let ok = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
    value
        .iter()
        .all(|&b| ok(b))
        .then(|| (String::from_utf8_lossy(name).to_ascii_lowercase(), value))
}

fn encode(parts: &[Part<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    push(&mut out, &(parts.len() as u64).to_be_bytes());
    for (headers, content) in parts {
        push(&mut out, &(headers.len() as u64).to_be_bytes());
        for (name, value) in headers {
            push(&mut out, name.as_bytes());
            push(&mut out, value);
        }
        push(&mut out, content);
    }
    out
}
