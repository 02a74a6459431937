use std::convert::Infallible;

use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::head::judge;
use super::*;

/// Sends `request` (raw bytes) to hyper's HTTP/1 server on a [`LengthProblemIo`], whose
/// service answers `status` with an empty body; returns everything written back.
async fn exchange(request: &[u8], status: u16) -> String {
    let (mut client, server) = tokio::io::duplex(64 << 10);
    let io = LengthProblemIo::new(server, LengthProblem::new("urn:idemgate:problem:"));
    let service = hyper::service::service_fn(move |_req| async move {
        let response = http::Response::builder()
            .status(status)
            .body(Full::new(Bytes::new()))
            .unwrap();
        Ok::<_, Infallible>(response)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let served = tokio::spawn(conn);
    client.write_all(request).await.unwrap();
    answer(client, served).await
}

/// Everything the server writes back on `client` until it closes (within 5 s), once its
/// connection task `served` ended.
async fn answer<T>(
    mut client: tokio::io::DuplexStream,
    served: tokio::task::JoinHandle<T>,
) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        client.read_to_end(&mut out),
    );
    read.await.expect("the server closes").unwrap();
    let _ = served.await;
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn differing_lengths_get_the_problem_instead_of_a_bare_400() {
    let request =
        b"POST /charges HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc";
    let answer = exchange(request, 201).await;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{answer}");
    assert!(
        head.contains("content-type: application/problem+json"),
        "{head}"
    );
    assert!(head.contains("connection: close"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("\r\ndate: "),
        "hyper's Date: {head}"
    );
    let length = format!("content-length: {}", body.len());
    assert!(head.contains(&length), "{head}");
    let problem: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(problem["type"], "urn:idemgate:problem:ambiguous-request");
    assert_eq!(problem["status"], 400);
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("content-length"));
}

#[tokio::test]
async fn a_comma_list_of_differing_lengths_gets_it_too() {
    let request = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3, 4\r\n\r\nabcd";
    let answer = exchange(request, 201).await;
    assert!(answer.contains("ambiguous-request"), "{answer}");
}

#[tokio::test]
async fn other_answers_pass_untouched() {
    // hyper's own 400 for another parse error keeps its empty body.
    let answer = exchange(b"POST / HTTP/1.1\r\nbad header\r\n\r\n", 201).await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(answer.ends_with("\r\n\r\n"), "no body: {answer}");
    assert!(!answer.contains("problem"), "{answer}");
    // The service's own empty 400, for a request with equal repeated lengths, is its own.
    let request = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 2\r\nconnection: close\r\n\r\nab";
    let answer = exchange(request, 400).await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(!answer.contains("problem"), "{answer}");
}

#[test]
fn heads_are_judged_by_hyper_s_rule() {
    let head = |fields: &str| format!("POST / HTTP/1.1\r\nhost: x\r\n{fields}\r\n");
    for (fields, refused) in [
        ("content-length: 1\r\ncontent-length: 2\r\n", Some(true)),
        ("Content-Length: 1\r\nCONTENT-LENGTH:  2 \r\n", Some(true)),
        ("content-length: 1, 2\r\n", Some(true)),
        ("content-length: x\r\ncontent-length: x\r\n", Some(true)),
        ("content-length: 2\r\ncontent-length: 2\r\n", Some(false)),
        // hyper reads one number per field, not a list: `2, 2` is refused.
        ("content-length: 2, 2\r\n", Some(true)),
        ("content-length: 2\r\n", Some(false)),
        ("content-length: x\r\n", Some(true)),
        (
            "transfer-encoding: chunked\r\ncontent-length: 1\r\ncontent-length: 2\r\n",
            Some(false),
        ),
        ("", Some(false)),
        // Fields starting as the two that matter do not count as them.
        (
            "content-type: a:b\r\ncookie: c=1\r\ncontent-length: 3\r\n",
            Some(false),
        ),
        (
            "te: trailers\r\ncontent-length: 1\r\ncontent-length: 2\r\n",
            Some(true),
        ),
        (
            "Transfer-Encoding: chunked\r\ncontent-length: 1, 2\r\n",
            Some(false),
        ),
        ("x-content-length: 1\r\ncontent-length: 2\r\n", Some(false)),
        (":content-length: 1\r\ncontent-length: 2\r\n", Some(false)),
    ] {
        assert_eq!(judge(head(fields).as_bytes()), refused, "{fields}");
    }
    assert_eq!(
        judge(b"POST / HTTP/1.1\nA: 1\ncontent-length: 1\ncontent-length: 2\n\n"),
        Some(true)
    );
    assert_eq!(
        judge(b"POST / HTTP/1.1\r\ncontent-length: 1\r\n"),
        None,
        "incomplete"
    );
    // Empty lines before the request line are skipped, as hyper skips them.
    for lead in ["\r\n", "\n", "\r\n\r\n"] {
        let head =
            format!("{lead}POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n");
        assert_eq!(judge(head.as_bytes()), Some(true), "{lead:?}");
    }
    assert_eq!(judge(b"\r\n\r\n"), None, "nothing but empty lines yet");
    assert_eq!(
        judge(b"{\"a\":1}\r\n\r\n"),
        Some(false),
        "not a request line"
    );
}

#[test]
fn a_head_split_across_reads_is_judged_whole() {
    let mut head = Head::default();
    head.read(b"POST / HTTP/1.1\r\ncontent-le");
    assert!(!head.conflicting());
    head.read(b"ngth: 1\r\ncontent-length: 2\r\n");
    head.read(b"\r\nab");
    assert!(head.conflicting());
    head.response_began();
    assert!(!head.conflicting());
    head.read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    head.response_began();
    head.read(b"POST / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n");
    assert!(!head.conflicting(), "an HTTP/2 connection is not watched");
}

/// hyper 1.x parses each `Content-Length` field as one run of digits: a list of equal
/// values or a sign gets its bare `400`, which must carry the problem; the spaces around a
/// value and two equal fields are accepted, and the service's answer is left alone.
#[test]
fn lists_signs_and_spaces_are_judged_as_hyper_parses_them() {
    let head = |fields: &str| format!("POST / HTTP/1.1\r\nhost: x\r\n{fields}\r\n");
    for (fields, refused) in [
        ("Content-Length: 7, 7\r\n", true),
        ("Content-Length: 7,7\r\n", true),
        ("Content-Length: +7\r\n", true),
        ("Content-Length: -7\r\n", true),
        ("Content-Length: 99999999999999999999\r\n", true),
        ("Content-Length:  7 \r\n", false),
        ("Content-Length:\t7\t\r\n", false),
        ("Content-Length: 7\r\nContent-Length: 7\r\n", false),
        ("Content-Length: 7\r\nContent-Length:  7 \r\n", false),
        // a length past hyper's maximum gets its 431, not the 400
        ("Content-Length: 18446744073709551615\r\n", false),
    ] {
        assert_eq!(judge(head(fields).as_bytes()), Some(refused), "{fields:?}");
    }
}

#[tokio::test]
async fn a_list_of_equal_lengths_and_a_signed_length_get_the_problem() {
    for fields in ["content-length: 7, 7", "content-length: +7"] {
        let request = format!("POST / HTTP/1.1\r\nhost: x\r\n{fields}\r\n\r\nabcdefg");
        let answer = exchange(request.as_bytes(), 201).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(answer.contains("ambiguous-request"), "{fields}: {answer}");
    }
}

#[tokio::test]
async fn a_spaced_length_and_two_equal_fields_reach_the_service() {
    for fields in [
        "content-length:  7 ",
        "content-length: 7\r\ncontent-length: 7",
    ] {
        let request =
            format!("POST / HTTP/1.1\r\nhost: x\r\n{fields}\r\nconnection: close\r\n\r\nabcdefg");
        let answer = exchange(request.as_bytes(), 400).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{answer}"
        );
        assert!(!answer.contains("problem"), "the service's own: {answer}");
    }
}

/// A body sent after hyper's `100 Continue` is a body, not a head: hyper's interim answer
/// does not start a new head, so a body that reads like a head with differing lengths never
/// turns the service's own `400` into the problem.
#[tokio::test]
async fn a_body_after_100_continue_is_not_judged_as_a_head() {
    let (mut client, server) = tokio::io::duplex(64 << 10);
    let io = LengthProblemIo::new(server, LengthProblem::new("urn:idemgate:problem:"));
    let service = hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async {
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let response = http::Response::builder()
            .status(400)
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert!(body.starts_with(b"X / HTTP/1.1"), "{body:?}");
        Ok::<_, Infallible>(response)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    let served = tokio::spawn(conn);
    let body = b"X / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
    let head = format!(
        "POST /e HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    let mut interim = vec![0; CONTINUE.len()];
    client.read_exact(&mut interim).await.unwrap();
    assert_eq!(interim, CONTINUE);
    client.write_all(body).await.unwrap();
    let answer = answer(client, served).await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(
        !answer.contains("ambiguous"),
        "the service's own 400: {answer}"
    );
}
