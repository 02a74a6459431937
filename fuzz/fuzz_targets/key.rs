//! The `Idempotency-Key` parser (`idemgate_core::key`) on any bytes.
//!
//! Input: `\n` separates header fields (so repeated fields are tried too); the first byte
//! also picks length bounds. Properties: no panic; one field at most is accepted; an
//! accepted key is printable ASCII within its bounds without surrounding space, its
//! `Display` form (an RFC 8941 sf-string) parses back to the same key, and a bare value is
//! accepted as written.
#![no_main]

use idemgate_core::key::{parse_header_values_with, IdempotencyKey, KeyError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (min, max) = match data.first().map(|b| b % 4) {
        Some(0) => (1, 4),
        Some(1) => (3, 3),
        _ => (8, 128),
    };
    let fields: Vec<&[u8]> = if data.is_empty() {
        Vec::new()
    } else {
        data.split(|&b| b == b'\n').collect()
    };
    let parsed = parse_header_values_with(fields.iter().copied(), min, max);
    if fields.is_empty() {
        assert_eq!(parsed, Ok(None));
        return;
    }
    if fields.len() > 1 {
        assert_eq!(
            parsed,
            Err(KeyError::Repeated {
                count: fields.len()
            })
        );
        return;
    }
    let raw = fields[0];
    let Ok(Some(key)) = parsed else { return };
    let s = key.as_str().as_bytes();
    assert!((min..=max).contains(&s.len()), "length bounds: {key:?}");
    assert!(
        s.iter().all(|b| (0x20..=0x7e).contains(b)),
        "printable: {key:?}"
    );
    assert!(
        s[0] != b' ' && s[s.len() - 1] != b' ',
        "surrounding space: {key:?}"
    );
    if raw[0] != b'"' {
        assert_eq!(s, raw, "a bare key is taken as written");
    }
    let shown = key.to_string();
    let again = parse_header_values_with([shown.as_bytes()], min, max);
    assert_eq!(again, Ok(Some(key.clone())), "display form {shown}");
    if (8..=128).contains(&s.len()) {
        assert_eq!(IdempotencyKey::new(key.as_str()).as_ref(), Ok(&key));
    }
});
