use super::*;

fn redact(body: &str, pointers: &[&str]) -> Option<String> {
    let pointers: Vec<String> = pointers.iter().map(|p| p.to_string()).collect();
    redact_json(body.as_bytes(), &pointers).map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn named_values_are_replaced_and_every_other_byte_kept() {
    let body = "{ \"id\" : \"ch_1\",\n  \"card\": {\"number\" : \"4242 4242\", \"exp\": 1229},\t\"n\": 1.50e3 }";
    let out = redact(body, &["/card/number", "/missing", "/card/exp/deeper"]).unwrap();
    assert_eq!(
        out,
        "{ \"id\" : \"ch_1\",\n  \"card\": {\"number\" : \"[redacted]\", \"exp\": 1229},\t\"n\": 1.50e3 }"
    );
}

#[test]
fn objects_arrays_and_the_whole_text_can_be_redacted() {
    let body = r#"{"a":{"x":[1,2]},"b":[{"s":"1"},{"s":"2"},{"t":3}],"c":null}"#;
    assert_eq!(
        redact(body, &["/a", "/b/*/s", "/c"]).unwrap(),
        r#"{"a":"[redacted]","b":[{"s":"[redacted]"},{"s":"[redacted]"},{"t":3}],"c":"[redacted]"}"#
    );
    assert_eq!(
        redact(body, &["/b/1"]).unwrap(),
        r#"{"a":{"x":[1,2]},"b":[{"s":"1"},"[redacted]",{"t":3}],"c":null}"#
    );
    assert_eq!(redact(body, &[""]).unwrap(), "\"[redacted]\"");
    // A leading zero is not an index (RFC 6901 §4); `*` in an object is a member's name.
    assert_eq!(redact(body, &["/b/01"]).unwrap(), body);
    assert_eq!(
        redact(r#"{"*":1,"a":2}"#, &["/*"]).unwrap(),
        r#"{"*":"[redacted]","a":2}"#
    );
}

#[test]
fn escaped_names_and_pointer_escapes_match() {
    let body = r#"{"a/b":1,"m~n":2,"\u0063ard":"x"}"#;
    assert_eq!(
        redact(body, &["/a~1b", "/m~0n", "/card"]).unwrap(),
        r#"{"a/b":"[redacted]","m~n":"[redacted]","\u0063ard":"[redacted]"}"#
    );
}

#[test]
fn texts_that_are_not_plain_json_are_refused() {
    for body in [
        "",
        "not json",
        "{\"a\":1,\"a\":2}",
        "{\"a\":",
        "\u{feff}{}",
        "[1,]",
    ] {
        assert_eq!(redact(body, &["/a"]), None, "{body:?}");
    }
    let deep = "[".repeat(200) + &"]".repeat(200);
    assert_eq!(redact(&deep, &["/0"]), None);
    assert_eq!(redact_json(b"{\"a\":\"\xff\"}", &["/a".into()]), None);
}

fn response(body: &str, headers: &[(&str, &str)]) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), Bytes::copy_from_slice(v.as_bytes())))
            .collect(),
        body: Bytes::copy_from_slice(body.as_bytes()),
        replayable: true,
        sealed_by: None,
    }
}

fn names(r: &StoredResponse) -> Vec<&str> {
    r.headers.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn the_stored_form_is_marked_and_headers_bound_to_the_body_go_with_a_change() {
    let headers = [
        ("content-type", "application/json"),
        ("ETag", "\"x\""),
        ("content-digest", "sha-256=:x:"),
    ];
    let pointers = vec!["/secret".to_string()];
    let r = store_form(
        response(r#"{"secret":"s3cr3t"}"#, &headers),
        StoreResponse::Redacted,
        &pointers,
        (false, 1 << 20),
    );
    assert_eq!(r.body, &br#"{"secret":"[redacted]"}"#[..]);
    assert_eq!(names(&r), ["content-type", REDACTED_HEADER]);
    // Nothing to redact: the same bytes, so the digests still hold.
    let r = store_form(
        response(r#"{"other":1}"#, &headers),
        StoreResponse::Redacted,
        &pointers,
        (false, 1 << 20),
    );
    assert_eq!(
        names(&r),
        ["content-type", "ETag", "content-digest", REDACTED_HEADER]
    );
    // Not JSON, or encoded: status-only.
    for (body, encoded) in [("s3cr3t", false), (r#"{"secret":"s3cr3t"}"#, true)] {
        let r = store_form(
            response(body, &headers),
            StoreResponse::Redacted,
            &pointers,
            (encoded, 1 << 20),
        );
        assert!(r.body.is_empty());
        assert_eq!(names(&r), ["content-type", BODY_OMITTED_HEADER]);
    }
    let r = store_form(
        response("s3cr3t", &headers),
        StoreResponse::StatusOnly,
        &[],
        (false, 1 << 20),
    );
    assert!(r.body.is_empty() && r.replayable);
    assert_eq!(names(&r), ["content-type", BODY_OMITTED_HEADER]);
    let full = response("s3cr3t", &headers);
    assert_eq!(
        store_form(
            full.clone(),
            StoreResponse::Full,
            &pointers,
            (false, 1 << 20)
        ),
        full
    );
}

#[test]
fn a_redacted_body_over_the_stored_size_cap_is_stored_status_only() {
    // 43 bytes; each `1` becomes `"[redacted]"`: 241 bytes.
    let body = format!("{{\"s\":[{}]}}", vec!["1"; 18].join(","));
    let pointers = vec!["/s/*".to_string()];
    let r = store_form(
        response(&body, &[]),
        StoreResponse::Redacted,
        &pointers,
        (false, 240),
    );
    assert!(r.body.is_empty());
    assert_eq!(names(&r), [BODY_OMITTED_HEADER]);
    let r = store_form(
        response(&body, &[]),
        StoreResponse::Redacted,
        &pointers,
        (false, 241),
    );
    assert_eq!(r.body.len(), 241);
    assert_eq!(names(&r), [REDACTED_HEADER]);
}
