//! Upstream answers the gateway must deliver and record right (many headers, `304`, `HEAD`,
//! an HTTP/1.0 upstream), answers sent before the request body was read (`413`), and
//! clients speaking HTTP/2 to the HTTP/1.1 upstream, over real sockets.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// `POST path` over a fresh connection (`Connection: close`), as alice with `key`; the
/// whole answer as text. Raw, because HTTP clients refuse more than 100 response headers.
async fn raw_post(base: &str, path: &str, key: &str) -> String {
    let mut tcp = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer alice\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    String::from_utf8(answer).unwrap()
}

/// The numbered `x-h-N` headers of a raw answer.
fn numbered_headers(answer: &str) -> usize {
    let head = answer.split("\r\n\r\n").next().unwrap();
    head.lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-h-"))
        .count()
}

#[tokio::test]
async fn a_201_with_150_headers_is_delivered_whole_and_replayed() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = raw_post(&gw.base, "/payments?headers=150", &k).await;
    assert!(first.starts_with("HTTP/1.1 201"), "{first}");
    assert_eq!(numbered_headers(&first), 150);
    assert!(first.contains("x-h-149: v149"), "{first}");
    let retry = raw_post(&gw.base, "/payments?headers=150", &k).await;
    assert!(retry.starts_with("HTTP/1.1 201"), "{retry}");
    assert!(retry.contains("idempotent-replayed: true"), "{retry}");
    assert_eq!(numbered_headers(&retry), 150);
    assert_eq!(
        first.split("\r\n\r\n").nth(1),
        retry.split("\r\n\r\n").nth(1),
        "same body"
    );
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn a_response_over_max_response_headers_fails_the_key_and_never_runs_again() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| c.max_response_headers = 120).await;
    let k = key();
    let first = post(&gw.base, "/payments?headers=150", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    let body = assert_problem(first, 502, "upstream-failed").await;
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("max_response_headers"),
        "{body}"
    );
    assert_eq!(up.count(), 1, "the upstream ran it");
    for _ in 0..2 {
        let retry = post(&gw.base, "/payments?headers=150", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        assert_problem(retry, 500, "previous-attempt-failed").await;
    }
    assert_eq!(up.count(), 1, "retries never run it again");
    // Under the limit the same route works.
    let ok = raw_post(&gw.base, "/payments?headers=110", &key()).await;
    assert!(ok.starts_with("HTTP/1.1 201"), "{ok}");
    gw.stop().await;
}

#[tokio::test]
async fn a_304_completes_the_key_as_not_replayable() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let first = post(&gw.base, "/payments?status=304", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(
        first.status(),
        304,
        "the first client gets the upstream's answer"
    );
    assert!(first.headers().get("idempotent-replayed").is_none());
    for _ in 0..2 {
        let retry = post(&gw.base, "/payments?status=304", Some(&k), "{}")
            .send()
            .await
            .unwrap();
        let body = assert_problem(retry, 410, "response-not-kept").await;
        assert!(body["detail"].as_str().unwrap().contains("304"), "{body}");
    }
    assert_eq!(up.count(), 1, "a 304 does not release the key");
    gw.stop().await;
}

/// The head of a covered `POST /payments` announcing `len` body bytes.
fn big_post_head(len: u64) -> String {
    format!(
        "POST /payments HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer alice\r\nidempotency-key: {}\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n",
        key()
    )
}

/// 2 MiB may still fit in loopback socket buffers (it does on Linux with default
/// settings); 8 MiB does not, and without the lingering close every attempt there saw its
/// body write reset instead of the `413`.
#[tokio::test]
async fn an_early_413_reaches_a_client_that_sends_its_whole_body() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    for len in [2 << 20, 8 << 20] {
        early_413_twenty_times(&addr, len).await;
    }
    assert_eq!(up.count(), 0);
    gw.stop().await;
}

async fn early_413_twenty_times(addr: &str, len: usize) {
    let body = vec![b' '; len];
    for attempt in 0..20 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(big_post_head(len as u64).as_bytes())
            .await
            .unwrap();
        for chunk in body.chunks(64 << 10) {
            tcp.write_all(chunk).await.unwrap_or_else(|e| {
                panic!("{len} bytes, attempt {attempt}: body write failed: {e}")
            });
        }
        let mut answer = Vec::new();
        tcp.read_to_end(&mut answer)
            .await
            .unwrap_or_else(|e| panic!("attempt {attempt}: read failed: {e}"));
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 413"),
            "attempt {attempt}: {answer}"
        );
        assert!(answer.contains("body-too-large"), "{answer}");
    }
}

#[tokio::test]
async fn a_client_that_never_stops_sending_cannot_hold_the_connection() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let mut tcp = TcpStream::connect(gw.base.trim_start_matches("http://"))
        .await
        .unwrap();
    tcp.write_all(big_post_head(1 << 40).as_bytes())
        .await
        .unwrap();
    let flood = async {
        let chunk = vec![b' '; 64 << 10];
        let mut sent = 0u64;
        while tcp.write_all(&chunk).await.is_ok() {
            sent += chunk.len() as u64;
            assert!(sent < 1 << 30, "the gateway kept reading past its bound");
        }
        sent
    };
    let sent = tokio::time::timeout(Duration::from_secs(60), flood)
        .await
        .expect("the gateway closed the connection");
    assert!(sent > 0);
    gw.stop().await;
}

/// A keyed `POST /payments` over an h2c (prior knowledge) connection; status and whether it
/// was a replay.
async fn h2c_post(base: &str, key: &str) -> (u16, bool) {
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let authority = base.trim_start_matches("http://");
    let tcp = TcpStream::connect(authority).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::post(format!("http://{authority}/payments"))
        .version(http::Version::HTTP_2)
        .header("authorization", "Bearer alice")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from_static(b"{\"amount\": 1}")))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let replayed = resp.headers().contains_key("idempotent-replayed");
    let status = resp.status().as_u16();
    resp.into_body().collect().await.unwrap();
    (status, replayed)
}

/// The HTTP/1 upstream client refused HTTP/2 requests before sending them: every one got
/// `502`, and the key was burned (`500 previous-attempt-failed` on the retry).
#[tokio::test]
async fn an_h2c_keyed_post_runs_once_and_its_retry_is_a_replay() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    assert_eq!(h2c_post(&gw.base, &k).await, (201, false));
    assert_eq!(h2c_post(&gw.base, &k).await, (201, true), "a replay");
    assert_eq!(up.count(), 1, "the upstream ran once");
    let host = up.last_headers();
    let authority = gw.base.trim_start_matches("http://");
    assert_eq!(host["x-forwarded-host"], authority, "the :authority");
    let upstream_authority = up.base.trim_start_matches("http://");
    assert_eq!(
        host["host"], upstream_authority,
        "the upstream's own host and port"
    );
    assert_eq!(host.get_all("host").iter().count(), 1);
    gw.stop().await;
}

/// `X-Forwarded-Host` and `X-Forwarded-For` are the gateway's to write: a client's own
/// `X-Forwarded-Host` never reaches the upstream (it did when the request had no `Host`),
/// and every `X-Forwarded-For` field the request had stays in the chain (only the first
/// was kept, dropping the nearest hop's).
#[tokio::test]
async fn forwarded_fields_are_the_gateway_s_and_keep_the_whole_chain() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let mut tcp = TcpStream::connect(gw.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = "GET /whoami HTTP/1.0\r\nauthorization: Bearer alice\r\n\
                x-forwarded-host: evil.example\r\nx-forwarded-for: 1.1.1.1\r\n\
                x-forwarded-for: 2.2.2.2\r\nconnection: x-secret, \u{e9}\r\n\
                x-secret: not-forwarded\r\n\r\n";
    // The obs-text byte 0xE9, not its UTF-8 spelling.
    let bytes: Vec<u8> = head.chars().map(|c| c as u32 as u8).collect();
    tcp.write_all(&bytes).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.0 2"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let seen = up.last_headers();
    assert!(!seen.contains_key("x-forwarded-host"), "{seen:?}");
    assert_eq!(seen["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 127.0.0.1");
    assert_eq!(seen.get_all("x-forwarded-for").iter().count(), 1);
    assert!(
        !seen.contains_key("x-secret"),
        "named by Connection: {seen:?}"
    );
    gw.stop().await;
}

/// `method path` over a fresh connection (`Connection: close`); the whole answer as text.
async fn raw_request(base: &str, method: &str, path: &str) -> String {
    let mut tcp = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    String::from_utf8(answer).unwrap()
}

#[tokio::test]
async fn a_head_gets_the_upstreams_length_and_no_body() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let get = raw_request(&gw.base, "GET", "/orders?status=200&bytes=300").await;
    assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
    assert!(get.contains("\r\ncontent-length: 300\r\n"), "{get}");
    assert_eq!(get.split("\r\n\r\n").nth(1).map(str::len), Some(300));
    let head = raw_request(&gw.base, "HEAD", "/orders?status=200&bytes=300").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\ncontent-length: 300\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
    assert_eq!(up.count(), 2);
    gw.stop().await;
}

/// An upstream that counts the requests it reads and answers each with `answer`, then
/// closes the connection.
async fn raw_upstream(answer: &'static str) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && tcp.read(&mut byte).await.unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                // Its body read whole, so that closing sends no reset.
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                let mut body = vec![0u8; length];
                tcp.read_exact(&mut body).await.unwrap();
                counted.fetch_add(1, SeqCst);
                let _ = tcp.write_all(answer.as_bytes()).await;
            });
        }
    });
    (base, count)
}

/// The gateway answers with its own version (RFC 9110 §6.2): an HTTP/1.1 client of an
/// HTTP/1.0 upstream gets an HTTP/1.1 answer, first and replayed alike.
#[tokio::test]
async fn an_http10_upstream_is_answered_as_http11() {
    let answer = "HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nhello from 1.0";
    let (up, _) = raw_upstream(answer).await;
    let gw = gateway(&up, "memory://", |_| {}).await;
    let get = raw_request(&gw.base, "GET", "/orders").await;
    assert!(get.starts_with("HTTP/1.1 200 OK\r\n"), "{get}");
    assert!(get.contains("hello from 1.0"), "{get}");
    let k = key();
    let first = raw_post(&gw.base, "/payments", &k).await;
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    let retry = raw_post(&gw.base, "/payments", &k).await;
    assert!(retry.starts_with("HTTP/1.1 200 OK\r\n"), "{retry}");
    assert!(retry.contains("idempotent-replayed: true"), "{retry}");
    assert!(retry.ends_with("hello from 1.0"), "{retry}");
    gw.stop().await;
}

/// A `101` the request did not ask for (the gateway strips `Upgrade`) came after the
/// operation had the request: `502`, and the key is failed, never run again. It released
/// the key, and every retry ran the operation again.
#[tokio::test]
async fn an_unsolicited_101_fails_the_key_and_never_runs_again() {
    let answer = "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: x\r\n\r\n";
    let (up, runs) = raw_upstream(answer).await;
    let gw = gateway(&up, "memory://", |_| {}).await;
    let k = key();
    let first = raw_post(&gw.base, "/payments", &k).await;
    assert!(first.starts_with("HTTP/1.1 502 "), "{first}");
    for _ in 0..3 {
        let retry = raw_post(&gw.base, "/payments", &k).await;
        assert!(!retry.starts_with("HTTP/1.1 101"), "{retry}");
        assert!(retry.contains("previous-attempt-failed"), "{retry}");
    }
    assert_eq!(runs.load(SeqCst), 1);
    gw.stop().await;
}

/// A `2xx` to `CONNECT` carries no framing (RFC 9110 §9.3.6): with the upstream's
/// `Content-Length` kept, hyper sent the client nothing at all.
#[tokio::test]
async fn a_successful_connect_reaches_the_client_without_framing() {
    let (up, _) = raw_upstream("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
    let gw = gateway(&up, "memory://", |_| {}).await;
    let answer = raw_request(&gw.base, "CONNECT", "example.com:443").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer:?}");
    assert!(!answer.contains("content-length"), "{answer}");
    assert!(!answer.contains("transfer-encoding"), "{answer}");
    gw.stop().await;
}
