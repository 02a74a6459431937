use super::*;
use idemgate_core::integrity::MAX_STORED_RESPONSE_BYTES;

fn response(headers: Vec<(String, Bytes)>, body: Bytes) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers,
        body,
        replayable: true,
        sealed_by: None,
    }
}

fn completed(outcome: Outcome) -> StoredResponse {
    match outcome {
        Outcome::Complete(r) => r,
        other => panic!("expected a completed record, got {other:?}"),
    }
}

#[test]
fn what_a_store_cannot_keep_completes_as_not_replayable() {
    let header = || vec![("location".to_owned(), Bytes::from_static(b"/p/1"))];
    let kept = completed(storable("r", response(header(), Bytes::from("{}"))));
    assert!(kept.replayable);
    assert_eq!(kept.body, "{}");

    let huge = Bytes::from(vec![b'x'; MAX_STORED_RESPONSE_BYTES]);
    let too_large = completed(storable("r", response(header(), huge)));
    assert_eq!((too_large.status, too_large.replayable), (201, false));
    assert!(too_large.body.is_empty());
    assert_eq!(too_large.headers, header(), "the headers are still kept");

    let bad_header = vec![(String::new(), Bytes::from_static(b"v"))];
    let unencodable = completed(storable("r", response(bad_header, Bytes::from("{}"))));
    assert!(!unencodable.replayable);
    assert!(unencodable.headers.is_empty() && unencodable.body.is_empty());
}

#[test]
fn retry_after_is_read_as_seconds_or_an_http_date_up_to_a_day() {
    use super::retry_after_ms;
    assert_eq!(retry_after_ms(b"0"), Some(0));
    assert_eq!(retry_after_ms(b" 3 "), Some(3000));
    assert_eq!(retry_after_ms(b"86400"), Some(86_400_000));
    assert_eq!(retry_after_ms(b"86401"), Some(86_400_000));
    assert_eq!(retry_after_ms(b"18446744073709551615"), Some(86_400_000));
    assert_eq!(retry_after_ms(b"99999999999999999999999"), Some(86_400_000));
    let in_an_hour = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    let date = httpdate::fmt_http_date(in_an_hour);
    let ms = retry_after_ms(date.as_bytes()).unwrap();
    assert!((3_590_000..=3_600_000).contains(&ms), "{date}: {ms}");
    assert_eq!(
        retry_after_ms(b"Sun, 06 Nov 1994 08:49:37 GMT"),
        Some(0),
        "a date past"
    );
    for bad in [&b""[..], b"1.5", b"-5", b"3, 4", b"soon", b"\xff"] {
        assert_eq!(
            retry_after_ms(bad),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
