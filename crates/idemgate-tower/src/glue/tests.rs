use super::*;
use idemgate_core::integrity::MAX_STORED_RESPONSE_BYTES;

fn response(headers: Vec<(String, Bytes)>, body: Bytes) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers,
        body,
        replayable: true,
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
