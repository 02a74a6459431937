//! The request head hyper is reading on a connection, as far as its `Content-Length`
//! fields go.

/// Heads longer than this are not looked at (hyper's own limit is about 400 KB; a head
/// with two `Content-Length` fields fits well within this).
const MAX_HEAD_BYTES: usize = 64 << 10;

/// What a connection knows of the request head hyper is reading.
#[derive(Debug)]
pub(super) struct Head {
    /// The bytes read since the last response began, while no head was judged yet (`None`:
    /// not watching until the next response begins). Empty (and unallocated) while a head
    /// arrives within one read.
    window: Option<Vec<u8>>,
    /// The last head judged has `Content-Length` values that hyper refuses.
    conflicting: bool,
    /// The connection speaks HTTP/2: never watched.
    http2: bool,
}

impl Default for Head {
    fn default() -> Self {
        Self {
            window: Some(Vec::new()),
            conflicting: false,
            http2: false,
        }
    }
}

impl Head {
    /// Whether the head judged last has `Content-Length` values that hyper refuses.
    pub(super) fn conflicting(&self) -> bool {
        self.conflicting
    }

    /// A response (or part of one) is being written: the next bytes read start a head.
    pub(super) fn response_began(&mut self) {
        self.conflicting = false;
        if !self.http2 {
            match &mut self.window {
                Some(window) => window.clear(),
                None => self.window = Some(Vec::new()),
            }
        }
    }

    /// Takes in `bytes` just read.
    pub(super) fn read(&mut self, bytes: &[u8]) {
        let Some(window) = &mut self.window else {
            return;
        };
        if bytes.is_empty() {
            return;
        }
        let fresh = window.is_empty();
        if !fresh {
            window.extend_from_slice(bytes);
        }
        let seen: &[u8] = if fresh { bytes } else { window };
        if seen.starts_with(b"PRI * HTTP/2.0") {
            self.http2 = true;
            self.window = None;
            return;
        }
        let seen_len = seen.len();
        match judge(seen) {
            Some(conflicting) => {
                self.conflicting = conflicting;
                self.window = None;
            }
            None if seen_len > MAX_HEAD_BYTES => self.window = None,
            None if fresh => window.extend_from_slice(bytes),
            None => {}
        }
    }
}

/// Whether the request head at the start of `bytes` has `Content-Length` fields hyper
/// refuses with its bare `400`; `None` until its blank line arrived.
///
/// hyper's rule (`proto/h1/role.rs`, `Server::parse`, with `headers::content_length_parse`):
/// fields in order; a `Transfer-Encoding` ends the check (a later `Content-Length` is
/// ignored); each `Content-Length` value, without the spaces and tabs around it (httparse
/// trims them), must be one run of ASCII digits that fits in a `u64` (no sign, no list:
/// `7, 7` and `+7` are refused, ` 7 ` is not) and equal every earlier one (two equal fields
/// are accepted). A value past hyper's maximum length gets its `431`, not this `400`. Empty
/// lines before the request line are skipped, as hyper skips them.
pub(super) fn judge(bytes: &[u8]) -> Option<bool> {
    // hyper (httparse) skips empty lines before the request line.
    let start = bytes.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let bytes = &bytes[start..];
    let end = head_end(bytes)?;
    let mut lines = lines(&bytes[..end]).map(|l| l.trim_ascii());
    let request_line = lines.next().unwrap_or_default();
    if !request_line.ends_with(b" HTTP/1.1") && !request_line.ends_with(b" HTTP/1.0") {
        return Some(false);
    }
    let mut first: Option<u64> = None;
    // Only a `Content-Length` or `Transfer-Encoding` field matters: other lines are skipped
    // on their first byte.
    let relevant = |l: &&[u8]| matches!(l.first(), Some(b'c' | b'C' | b't' | b'T'));
    for line in lines.filter(relevant) {
        let Some(colon) = memchr::memchr(b':', line) else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Some(false);
        }
        if !name.eq_ignore_ascii_case(b"content-length") {
            continue;
        }
        let Some(n) = digits(value) else {
            return Some(true);
        };
        match first {
            _ if n > MAX_LENGTH => return Some(false),
            None => first = Some(n),
            Some(prev) if prev != n => return Some(true),
            Some(_) => {}
        }
    }
    Some(false)
}

/// hyper's largest `Content-Length` (`body::length::MAX_LEN`); past it, `431`.
const MAX_LENGTH: u64 = u64::MAX - 2;

/// A field value as hyper reads a `Content-Length`: spaces and tabs around it trimmed, then
/// one or more ASCII digits, no sign, within a `u64`.
fn digits(value: &[u8]) -> Option<u64> {
    let start = value.iter().position(|&b| b != b' ' && b != b'\t')?;
    let end = value.iter().rposition(|&b| b != b' ' && b != b'\t')?;
    value[start..=end].iter().try_fold(0u64, |n, &b| {
        let digit = b.is_ascii_digit().then(|| u64::from(b - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// Where the head's blank line starts: after `\r\n\r\n` or `\n\n` (hyper takes both).
fn head_end(bytes: &[u8]) -> Option<usize> {
    memchr::memchr_iter(b'\n', bytes).find(|&nl| match bytes.get(nl + 1) {
        Some(b'\n') => true,
        Some(b'\r') => bytes.get(nl + 2) == Some(&b'\n'),
        _ => false,
    })
}

/// `head` split at every `\n`, as `split` would (the `\r` before it stays), found with
/// `memchr`: a byte-by-byte split cost 2.6k instructions per request head.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at > head.len() {
            return None;
        }
        let end = memchr::memchr(b'\n', &head[at..]).map_or(head.len(), |n| at + n);
        let line = &head[at..end];
        at = end + 1;
        Some(line)
    })
}
