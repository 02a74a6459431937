use bytes::Bytes;

use super::*;
use crate::integrity::{check_storable, RawRecord};
use crate::testing::{fp, response, unique_key};

fn ring(seeds: &[u8]) -> Keyring {
    Keyring::new(seeds.iter().map(|s| [*s; 32]).collect()).unwrap()
}

#[test]
fn a_sealed_response_opens_to_the_same_bytes_and_holds_none_of_them() {
    let ring = ring(&[1]);
    let key = unique_key("alice");
    let mut clear = response(7);
    clear.body = Bytes::from_static(b"{\"secret\":\"marker-4242\"}");
    clear
        .headers
        .push(("x-token".into(), Bytes::from_static(b"marker-4242")));
    let sealed = ring.seal(&key, 3, &clear);
    assert!(!sealed.body.windows(11).any(|w| w == b"marker-4242"));
    assert_eq!(
        sealed.body.len(),
        SEAL_OVERHEAD + 4 + clear.encode_headers().len() + clear.body.len()
    );
    assert!(check_storable(&sealed).is_ok());
    assert_eq!(ring.open(&key, 3, sealed.clone()).unwrap(), clear);
    // Two seals of one response differ (random nonce).
    assert_ne!(ring.seal(&key, 3, &clear).body, sealed.body);
}

#[test]
fn a_sealed_response_does_not_open_anywhere_else() {
    let ring = ring(&[1]);
    let key = unique_key("alice");
    let sealed = ring.seal(&key, 3, &response(2));
    let id = ring.sealing_id();
    let forged = Err(OpenError::Forged(id));
    assert_eq!(ring.open(&unique_key("alice"), 3, sealed.clone()), forged);
    assert_eq!(ring.open(&key, 4, sealed.clone()), forged);
    let mut other_status = sealed.clone();
    other_status.status = 200;
    assert_eq!(ring.open(&key, 3, other_status), forged);
    let mut not_replayable = sealed.clone();
    not_replayable.replayable = false;
    assert_eq!(ring.open(&key, 3, not_replayable), forged);
    let mut flipped = sealed.clone();
    let mut body = flipped.body.to_vec();
    body[30] ^= 1;
    flipped.body = Bytes::from(body);
    assert_eq!(ring.open(&key, 3, flipped), forged);
    let mut cut = sealed.clone();
    cut.body = sealed.body.slice(..10);
    assert_eq!(ring.open(&key, 3, cut), forged);
}

#[test]
fn rotation_opens_with_every_key_and_seals_with_the_first() {
    let old = ring(&[1]);
    let key = unique_key("alice");
    let sealed = old.seal(&key, 1, &response(4));
    let rotated = ring(&[2, 1]);
    assert_ne!(rotated.sealing_id(), old.sealing_id());
    assert_eq!(rotated.open(&key, 1, sealed.clone()).unwrap(), response(4));
    assert_eq!(
        rotated.seal(&key, 1, &response(4)).sealed_by,
        Some(rotated.sealing_id())
    );
    let removed = ring(&[2]);
    assert_eq!(
        removed.open(&key, 1, sealed),
        Err(OpenError::UnknownKey(old.sealing_id()))
    );
}

#[test]
fn the_key_id_comes_from_the_key_not_its_position() {
    assert_eq!(ring(&[1, 2]).ids().nth(1), ring(&[2]).ids().next());
    assert_eq!(key_id(&[1; 32]).to_string().len(), 16);
    assert_eq!(key_id(&[1; 32]).to_string().parse(), Ok(key_id(&[1; 32])));
    assert!(Keyring::new(vec![[1; 32], [1; 32]])
        .unwrap_err()
        .contains("twice"));
    assert!(Keyring::new(vec![]).is_err());
}

#[test]
fn key_files_need_64_hex_digits_and_errors_never_show_them() {
    let good = "0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789abcdef";
    assert!(parse_key(format!("  {good}\n").as_bytes()).is_ok());
    for bad in [&good[1..], "zz", &format!("{good}00"), &"ab".repeat(32)] {
        let err = parse_key(bad.as_bytes()).unwrap_err();
        assert!(!err.contains("0123"), "{err}");
    }
    let dir = std::env::temp_dir().join(format!("idemgate-keys-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.key");
    std::fs::write(&file, "secret-but-short").unwrap();
    let err = Keyring::load(&[&file]).unwrap_err();
    assert!(err.contains("bad.key") && !err.contains("secret"), "{err}");
    let missing = Keyring::load(&[dir.join("none.key")]).unwrap_err();
    assert!(missing.contains("none.key"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_sealed_record_round_trips_through_the_raw_form_and_its_checksum() {
    let ring = ring(&[1]);
    let key = unique_key("alice");
    let sealed = ring.seal(&key, 1, &response(5));
    let raw = RawRecord::completed(&key, fp(1), 1, 0, 1000, &sealed);
    assert_eq!(raw.sealed_by, Some(ring.sealing_id().to_string()));
    let record = raw.clone().validate().unwrap();
    assert_eq!(record.response.as_ref(), Some(&sealed));
    // The checksum covers the key id: a record relabelled with another id is corrupt.
    let mut relabelled = raw.clone();
    relabelled.sealed_by = Some(ring_id(2));
    assert!(relabelled.validate().is_err());
    // A build that does not know sealing reads the record in clear: its checksum fails.
    let mut unaware = raw.clone();
    unaware.sealed_by = None;
    assert!(unaware.validate().is_err());
    let mut bad_id = raw;
    bad_id.sealed_by = Some("XYZ".into());
    assert!(bad_id.validate().is_err());
}

fn ring_id(seed: u8) -> String {
    ring(&[seed]).sealing_id().to_string()
}

#[test]
fn a_not_replayable_response_is_sealed_too_and_opens_without_a_body() {
    let ring = ring(&[1]);
    let key = unique_key("alice");
    let mut clear = response(5);
    clear.body = Bytes::new();
    clear.replayable = false;
    let sealed = ring.seal(&key, 1, &clear);
    let raw = RawRecord::completed(&key, fp(1), 1, 0, 1000, &sealed);
    let stored = raw.validate().unwrap().response.unwrap();
    assert_eq!(ring.open(&key, 1, stored).unwrap(), clear);
}

#[test]
fn keyed_fingerprints_hide_the_digest_and_match_under_any_key() {
    let plain = fp(9);
    let old = ring(&[1]);
    let keyed = old.keyed_fingerprint(plain);
    assert_eq!(keyed.version, plain.version | KEYED_FINGERPRINT);
    assert_ne!(keyed.digest, plain.digest);
    assert_eq!(old.keyed_fingerprint(plain), keyed, "deterministic");
    let rotated = ring(&[2, 1]);
    assert_ne!(rotated.keyed_fingerprint(plain), keyed);
    assert_eq!(rotated.matching_fingerprint(plain, &keyed), Some(keyed));
    assert_eq!(rotated.matching_fingerprint(fp(8), &keyed), None);
    assert_eq!(ring(&[2]).matching_fingerprint(plain, &keyed), None);
}
