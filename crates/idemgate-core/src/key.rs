//! The `Idempotency-Key` header: syntax and validation.
//!
//! The value is an RFC 8941 `sf-string` (`"..."`, with `\"` and `\\` escapes), as
//! draft-ietf-httpapi-idempotency-key-header-07 §2 says, or a bare unquoted value (what
//! Stripe's clients send). After unquoting the key must be 8–128 characters of printable
//! ASCII (0x20–0x7E) without leading or trailing space. Two header fields, or a comma
//! outside quotes (two fields merged by an intermediary), are rejected: a server cannot know
//! which of them the client meant.
//!
//! ```
//! use idemgate_core::key::{parse_header_values, IdempotencyKey};
//!
//! let key = parse_header_values([&b"\"8e03978e-40d5-43e8-bc93-6894a57f9324\""[..]]).unwrap();
//! assert_eq!(key.unwrap().as_str(), "8e03978e-40d5-43e8-bc93-6894a57f9324");
//! assert!(parse_header_values([&b"short"[..]]).is_err());
//! ```

use std::fmt;

/// The smallest key length accepted by default, in characters.
pub const DEFAULT_MIN_LEN: usize = 8;
/// The largest key length accepted by default, in characters.
pub const DEFAULT_MAX_LEN: usize = 128;

/// A validated idempotency key: 8–128 (by default) printable ASCII characters, compared
/// byte for byte (keys are case-sensitive).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Validates an unquoted key with the default length bounds.
    ///
    /// # Errors
    /// [`KeyError`] naming the rule that failed.
    pub fn new(value: &str) -> Result<Self, KeyError> {
        validate(value.as_bytes(), DEFAULT_MIN_LEN, DEFAULT_MAX_LEN)?;
        Ok(Self(value.to_owned()))
    }

    /// The key as sent by the client, without quotes.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for IdempotencyKey {
    /// Formats the key as an RFC 8941 `sf-string`, the form the draft specifies.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            if c == '"' || c == '\\' {
                f.write_str("\\")?;
            }
            write!(f, "{c}")?;
        }
        f.write_str("\"")
    }
}

/// Why a key header was rejected. Each variant names one rule of the contract table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header is present but empty.
    #[error("the idempotency key is empty")]
    Empty,
    /// Shorter than the minimum after unquoting.
    #[error("the idempotency key is {len} characters long; at least {min} are required")]
    TooShort {
        /// Length in characters after unquoting.
        len: usize,
        /// Configured minimum.
        min: usize,
    },
    /// Longer than the maximum after unquoting.
    #[error("the idempotency key is {len} characters long; at most {max} are allowed")]
    TooLong {
        /// Length in characters after unquoting.
        len: usize,
        /// Configured maximum.
        max: usize,
    },
    /// A byte outside printable ASCII (0x20–0x7E).
    #[error(
        "the idempotency key has a character outside printable ASCII (0x20-0x7E) at byte {index}"
    )]
    InvalidChar {
        /// Byte offset in the unquoted key.
        index: usize,
    },
    /// Leading or trailing space inside the key.
    #[error("the idempotency key starts or ends with a space")]
    SurroundingSpace,
    /// The header field appears more than once.
    #[error("the idempotency key header appears {count} times; send it once")]
    Repeated {
        /// Number of fields received.
        count: usize,
    },
    /// A comma outside quotes: two fields were merged into one.
    #[error("the idempotency key header holds a comma outside quotes (merged header fields); send one key")]
    Merged,
    /// A quoted value that is not a valid RFC 8941 `sf-string`.
    #[error("the idempotency key is not a valid RFC 8941 sf-string: {reason}")]
    BadQuoting {
        /// What is wrong with the quoting.
        reason: &'static str,
    },
}

/// Parses the raw values of every `Idempotency-Key` field of one request.
///
/// Returns `Ok(None)` when there is no field, `Ok(Some(key))` for one valid field, and an error
/// for anything else (see the module docs). Default length bounds apply.
///
/// # Errors
/// [`KeyError`] for the first rule the header breaks.
pub fn parse_header_values<'a, I>(values: I) -> Result<Option<IdempotencyKey>, KeyError>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    parse_header_values_with(values, DEFAULT_MIN_LEN, DEFAULT_MAX_LEN)
}

/// [`parse_header_values`] with explicit length bounds, in characters.
///
/// # Errors
/// [`KeyError`] for the first rule the header breaks.
pub fn parse_header_values_with<'a, I>(
    values: I,
    min: usize,
    max: usize,
) -> Result<Option<IdempotencyKey>, KeyError>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut iter = values.into_iter();
    let Some(first) = iter.next() else {
        return Ok(None);
    };
    let rest = iter.count();
    if rest > 0 {
        return Err(KeyError::Repeated { count: rest + 1 });
    }
    parse_value(first, min, max).map(Some)
}

fn parse_value(raw: &[u8], min: usize, max: usize) -> Result<IdempotencyKey, KeyError> {
    if raw.is_empty() {
        return Err(KeyError::Empty);
    }
    let unquoted = if raw[0] == b'"' {
        unquote(raw)?
    } else {
        if raw.contains(&b',') {
            return Err(KeyError::Merged);
        }
        if let Some(index) = raw.iter().position(|&b| b == b'"' || b == b'\\') {
            return Err(KeyError::BadQuoting {
                reason: if raw[index] == b'"' {
                    "a quote inside an unquoted key"
                } else {
                    "a backslash is only allowed as an escape inside a quoted key"
                },
            });
        }
        raw.to_vec()
    };
    validate(&unquoted, min, max)?;
    // validate() checked printable ASCII, so this is valid UTF-8.
    let s = String::from_utf8(unquoted).map_err(|e| KeyError::InvalidChar {
        index: e.utf8_error().valid_up_to(),
    })?;
    Ok(IdempotencyKey(s))
}

/// RFC 8941 §4.2.5: an sf-string is DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
fn unquote(raw: &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 1;
    while i < raw.len() {
        match raw[i] {
            b'\\' => {
                match raw.get(i + 1) {
                    Some(&c @ (b'"' | b'\\')) => out.push(c),
                    _ => {
                        return Err(KeyError::BadQuoting {
                            reason: "a backslash not followed by '\"' or '\\'",
                        })
                    }
                }
                i += 2;
            }
            b'"' => {
                let trailing = &raw[i + 1..];
                if trailing.is_empty() {
                    return Ok(out);
                }
                if trailing.contains(&b',') {
                    return Err(KeyError::Merged);
                }
                return Err(KeyError::BadQuoting {
                    reason: "characters after the closing quote",
                });
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err(KeyError::BadQuoting {
        reason: "no closing quote",
    })
}

fn validate(key: &[u8], min: usize, max: usize) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(index) = key.iter().position(|&b| !(0x20..=0x7e).contains(&b)) {
        return Err(KeyError::InvalidChar { index });
    }
    if key[0] == b' ' || key[key.len() - 1] == b' ' {
        return Err(KeyError::SurroundingSpace);
    }
    if key.len() < min {
        return Err(KeyError::TooShort {
            len: key.len(),
            min,
        });
    }
    if key.len() > max {
        return Err(KeyError::TooLong {
            len: key.len(),
            max,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn parse(v: &str) -> Result<Option<IdempotencyKey>, KeyError> {
        parse_header_values([v.as_bytes()])
    }

    #[test]
    fn contract_table_rows() {
        let ok = |v: &str, want: &str| assert_eq!(parse(v).unwrap().unwrap().as_str(), want, "{v}");
        ok("abcdefgh", "abcdefgh");
        ok("\"abcdefgh\"", "abcdefgh");
        ok("\"ab\\\"cd\\\\efgh\"", "ab\"cd\\efgh");
        ok("\"a,b,c,d,e\"", "a,b,c,d,e");
        ok("abc def gh", "abc def gh");
        ok(&"x".repeat(128), &"x".repeat(128));

        let err = |v: &[u8], want: KeyError| assert_eq!(parse_header_values([v]), Err(want));
        err(b"", KeyError::Empty);
        err(b"\"\"", KeyError::Empty);
        err(b"abcdefg", KeyError::TooShort { len: 7, min: 8 });
        err(b"\"abcdefg\"", KeyError::TooShort { len: 7, min: 8 });
        err(
            "x".repeat(129).as_bytes(),
            KeyError::TooLong { len: 129, max: 128 },
        );
        err(b"abcd\x01efgh", KeyError::InvalidChar { index: 4 });
        err("abcdéfgh".as_bytes(), KeyError::InvalidChar { index: 4 });
        err(b"\" abcdefgh\"", KeyError::SurroundingSpace);
        err(b"\"abcdefgh \"", KeyError::SurroundingSpace);
        err(b"abcdefgh,ijklmnop", KeyError::Merged);
        err(b"\"abcdefgh\", \"ijklmnop\"", KeyError::Merged);
        assert!(matches!(
            parse("\"abcdefgh"),
            Err(KeyError::BadQuoting { .. })
        ));
        assert!(matches!(
            parse("\"abcd\\efgh\""),
            Err(KeyError::BadQuoting { .. })
        ));
        assert!(matches!(
            parse("\"abcdefgh\"x"),
            Err(KeyError::BadQuoting { .. })
        ));
        assert!(matches!(
            parse("abcd\"efgh"),
            Err(KeyError::BadQuoting { .. })
        ));
        assert_eq!(
            parse_header_values([&b"abcdefgh"[..], &b"abcdefgh"[..]]),
            Err(KeyError::Repeated { count: 2 })
        );
        assert_eq!(parse_header_values(std::iter::empty::<&[u8]>()), Ok(None));
    }

    #[test]
    fn keys_are_case_sensitive() {
        assert_ne!(
            IdempotencyKey::new("abcdefgh").unwrap(),
            IdempotencyKey::new("ABCDEFGH").unwrap()
        );
    }

    proptest! {
        #[test]
        fn parser_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_header_values([&raw[..]]);
        }

        #[test]
        fn display_round_trips(key in "[ -~]{8,128}") {
            prop_assume!(!key.starts_with(' ') && !key.ends_with(' '));
            let k = IdempotencyKey::new(&key).unwrap();
            let shown = k.to_string();
            prop_assert_eq!(parse(&shown).unwrap().unwrap(), k);
        }
    }
}
