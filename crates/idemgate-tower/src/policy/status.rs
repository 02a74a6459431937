//! Status patterns of the route settings (`store_statuses`, ...) and what a status does to
//! the record.

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
