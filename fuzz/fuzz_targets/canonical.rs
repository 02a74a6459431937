//! The fingerprint's canonical JSON (`idemgate_core::canonical`) on any bytes.
//!
//! Input: the JSON text; when the text's first line starts with `/`, that line lists JSON
//! Pointers to ignore (separated by spaces) and the rest is the text. Properties: no panic;
//! the canonical form is valid JSON with the same value as the input (serde_json's reading),
//! and canonicalizing it again gives itself (idempotence); plain RFC 8785 (`jcs`) is
//! idempotent too.
#![no_main]

use idemgate_core::canonical::{canonical_json, jcs};
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (pointers, text) = split_pointers(data);
    let Some(canonical) = canonical_json(text, &pointers) else {
        return;
    };
    assert_eq!(
        canonical_json(&canonical, &[]).as_deref(),
        Some(&canonical[..]),
        "canonical JSON is idempotent"
    );
    assert!(
        serde_json::from_slice::<IgnoredAny>(&canonical).is_ok(),
        "canonical form is JSON"
    );
    if pointers.is_empty() {
        // serde_json's `Value` refuses numbers beyond f64 (`1e400`) that the grammar allows.
        if let (Ok(read), Ok(written)) = (
            serde_json::from_slice::<Value>(text),
            serde_json::from_slice::<Value>(&canonical),
        ) {
            assert_eq!(read, written, "canonical form keeps the value");
        }
        if let Some(plain) = jcs(text) {
            assert_eq!(
                jcs(&plain).as_deref(),
                Some(&plain[..]),
                "jcs is idempotent"
            );
        }
    }
});

fn split_pointers(data: &[u8]) -> (Vec<String>, &[u8]) {
    if data.first() != Some(&b'/') {
        return (Vec::new(), data);
    }
    let end = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let line = String::from_utf8_lossy(&data[..end]);
    let pointers = line.split(' ').map(str::to_owned).collect();
    (pointers, data.get(end + 1..).unwrap_or_default())
}
