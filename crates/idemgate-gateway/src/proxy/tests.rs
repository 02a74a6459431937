use super::*;

fn h2_post() -> Request<BoxBody> {
    let mut req = Request::post("http://api.example:8080/payments")
        .header(COOKIE, "a=1")
        .header(COOKIE, "b=2")
        .body(idemgate_tower::body::full(bytes::Bytes::new()))
        .unwrap();
    *req.version_mut() = Version::HTTP_2;
    req
}

#[test]
fn the_upstream_host_is_what_hyper_util_would_send() {
    let host = |uri: &str| {
        let uri: Uri = uri.parse().unwrap();
        upstream_host(uri.scheme().unwrap(), uri.authority().unwrap())
    };
    assert_eq!(host("http://api:80/v1"), "api");
    assert_eq!(host("http://api:8080"), "api:8080");
    assert_eq!(host("http://api"), "api");
    assert_eq!(host("https://api:443"), "api");
    assert_eq!(host("https://api:80"), "api:80");
    assert_eq!(host("http://[::1]:8080"), "[::1]:8080");
    assert_eq!(host("http://user:pw@api:81"), "api:81");
}

/// `X-Forwarded-For` for a request with these prior fields, from `ip`.
fn xff(fields: &[&[u8]], ip: IpAddr) -> HeaderValue {
    let mut headers = HeaderMap::new();
    for f in fields {
        headers.append(X_FORWARDED_FOR, HeaderValue::from_bytes(f).unwrap());
    }
    forwarded_for(headers.get_all(X_FORWARDED_FOR), ip).unwrap()
}

#[test]
fn x_forwarded_for_is_the_address_as_display_writes_it_after_every_prior_field() {
    let octets = [0u8, 1, 9, 10, 42, 99, 100, 101, 199, 200, 250, 255];
    for (a, b) in octets.iter().zip(octets.iter().rev()) {
        let ip = IpAddr::from([*a, *b, *b, *a]);
        assert_eq!(xff(&[], ip).to_str().unwrap(), ip.to_string());
    }
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(xff(&[], v6), "2001:db8::1");
    let ip = IpAddr::from([127, 0, 0, 1]);
    assert_eq!(xff(&[b"203.0.113.7"], ip), "203.0.113.7, 127.0.0.1");
    // Every field, in order: the nearest hop's is not lost behind a forged first one.
    assert_eq!(
        xff(&[b"1.1.1.1", b"2.2.2.2, 3.3.3.3"], ip),
        "1.1.1.1, 2.2.2.2, 3.3.3.3, 127.0.0.1"
    );
    assert_eq!(
        xff(&[b"caf\xc3\xa9", b"2.2.2.2"], ip).as_bytes(),
        b"caf\xc3\xa9, 2.2.2.2, 127.0.0.1"
    );
    assert_eq!(xff(&[b"", b"  ", b"2.2.2.2"], ip), "2.2.2.2, 127.0.0.1");
}

#[test]
fn hop_by_hop_fields_and_those_connection_names_are_removed_and_nothing_else() {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        ("connection", "keep-alive, x-secret"),
        ("keep-alive", "timeout=5"),
        ("x-secret", "1"),
        ("te", "trailers"),
        ("upgrade", "websocket"),
        ("content-type", "application/json"),
        ("x-kept", "2"),
    ] {
        headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    // A field with a byte outside visible ASCII still names its valid tokens.
    let obs_text = HeaderValue::from_bytes(b"x-also-secret, \xe9").unwrap();
    headers.append(http::header::CONNECTION, obs_text);
    headers.append(
        HeaderName::from_static("x-also-secret"),
        HeaderValue::from_static("1"),
    );
    strip_hop_by_hop(&mut headers);
    let mut left: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
    left.sort_unstable();
    assert_eq!(left, ["content-type", "x-kept"]);
    let mut plain = HeaderMap::new();
    plain.insert(
        HeaderName::from_static("x-kept"),
        HeaderValue::from_static("1"),
    );
    strip_hop_by_hop(&mut plain);
    assert_eq!(plain.len(), 1);
}

#[test]
fn an_http2_request_goes_out_as_http11_with_host_and_one_cookie_field() {
    let mut req = h2_post();
    to_http11(&mut req);
    assert_eq!(req.version(), Version::HTTP_11);
    assert_eq!(req.headers()[HOST], "api.example:8080");
    let cookies: Vec<_> = req.headers().get_all(COOKIE).iter().collect();
    assert_eq!(cookies, ["a=1; b=2"]);
    // A Host the client sent is kept.
    let mut req = h2_post();
    req.headers_mut()
        .insert(HOST, HeaderValue::from_static("h"));
    to_http11(&mut req);
    assert_eq!(req.headers()[HOST], "h");
}

/// The HTTP/1 client refuses an HTTP/2 request before sending it: "not sent", so the key
/// is released, never "may have run".
#[tokio::test]
async fn a_request_the_client_refuses_to_send_counts_as_not_sent() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move { listener.accept().await });
    let uri: Uri = format!("http://{addr}").parse().unwrap();
    let proxy = Proxy::new(&uri, Duration::from_secs(5), 100, None);
    let mut req = h2_post();
    *req.uri_mut() = format!("http://{addr}/payments").parse().unwrap();
    let e = proxy.upstream.client.request(req).await.unwrap_err();
    assert!(not_sent(&e), "{e:?}");
    drop(accept);
}

/// hyper parses a request's path out of the buffer it read the head into, and hyper-util's
/// client keeps a clone of the upstream URI until the response comes: a shared path would
/// keep that whole buffer (8 KiB) for every request in flight.
#[tokio::test]
async fn the_upstream_uri_shares_no_bytes_with_the_request_head() {
    let head = bytes::Bytes::from(b"/payments?id=7".to_vec());
    let uri = Uri::from_maybe_shared(head.clone()).unwrap();
    assert_eq!(
        uri.path().as_ptr(),
        head.as_ptr(),
        "parsing shares the head's bytes"
    );
    let within_head = |p: *const u8| head.as_ptr_range().contains(&p);
    for base in ["http://api:8080", "http://api:8080/v1"] {
        let proxy = Proxy::new(&base.parse().unwrap(), Duration::from_secs(5), 100, None);
        let upstream = proxy.upstream.upstream_uri(&uri).unwrap();
        assert_eq!(upstream.to_string(), format!("{base}/payments?id=7"));
        assert!(!within_head(upstream.path().as_ptr()), "{base}");
    }
}
