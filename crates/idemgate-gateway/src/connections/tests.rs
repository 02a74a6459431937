//! The read deadline and the body timeout on in-memory connections, on tokio's paused
//! clock (the times asserted are the clock's, not the machine's).

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::Instant;

use super::conn::Conn;
use super::deadline::TimedIo;
use super::request::{BodyReadTimeout, TimedBody};
use super::{files_needed, Limits, Listening, SERVICE};

const HEADER: Duration = Duration::from_secs(2);
const IDLE: Duration = Duration::from_secs(7);

fn conf() -> Listening {
    let limits = Limits {
        header_read_timeout: HEADER,
        body_read_timeout: Duration::from_secs(3),
        idle_timeout: IDLE,
        max_connections: 10,
    };
    Listening::new(SERVICE, limits, "urn:idemgate:problem:")
}

/// A client end and the server's end with its deadline; the server's end is read as
/// hyper would (until it reads as closed) on a task that returns what it read.
fn connection(conn: &Arc<Conn>) -> (DuplexStream, tokio::task::JoinHandle<Vec<u8>>) {
    let (client, server) = duplex(64 << 10);
    let mut server = TimedIo::new(server, conn.clone(), &conf());
    let reader = tokio::spawn(async move {
        let mut read = Vec::new();
        server.read_to_end(&mut read).await.unwrap();
        read
    });
    (client, reader)
}

/// Everything the client end reads until the server's end closes.
async fn answer(client: &mut DuplexStream) -> String {
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    String::from_utf8(answer).unwrap()
}

fn assert_408(answer: &str) {
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(answer.contains("\r\ndate: "), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let problem: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(problem["type"], "urn:idemgate:problem:request-timeout");
    assert_eq!(problem["status"], 408);
    let length = format!("\r\ncontent-length: {}\r\n", body.len());
    assert!(answer.contains(&length), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn a_silent_connection_gets_408_at_header_read_timeout() {
    let conn = Arc::new(Conn::default());
    let started = Instant::now();
    let (mut client, reader) = connection(&conn);
    assert_408(&answer(&mut client).await);
    assert_eq!(started.elapsed(), HEADER);
    assert!(reader.await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn half_a_head_gets_408_at_header_read_timeout_from_the_accept() {
    let conn = Arc::new(Conn::default());
    let started = Instant::now();
    let (mut client, reader) = connection(&conn);
    tokio::time::sleep(HEADER / 2).await;
    client
        .write_all(b"POST /v1/x HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert_408(&answer(&mut client).await);
    assert_eq!(started.elapsed(), HEADER);
    assert_eq!(reader.await.unwrap(), b"POST /v1/x HTTP/1.1\r\nHost: x\r\n");
}

/// Between requests the wait is `idle_timeout` (longer than `header_read_timeout` here),
/// from the end of the last response, and it ends without an answer.
#[tokio::test(start_paused = true)]
async fn a_kept_alive_connection_closes_silently_at_idle_timeout() {
    let conn = Arc::new(Conn::default());
    let (mut client, reader) = connection(&conn);
    client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let request = conn.begin();
    // Longer than the head's timeout: no deadline while a request is in flight.
    tokio::time::sleep(HEADER * 3).await;
    let ended = Instant::now();
    drop(request);
    assert_eq!(answer(&mut client).await, "");
    assert_eq!(ended.elapsed(), IDLE);
    assert_eq!(reader.await.unwrap(), b"GET / HTTP/1.1\r\n\r\n");
}

/// The next head's first byte starts `header_read_timeout` again.
#[tokio::test(start_paused = true)]
async fn the_next_head_has_header_read_timeout_from_its_first_byte() {
    let conn = Arc::new(Conn::default());
    let (mut client, _reader) = connection(&conn);
    drop(conn.begin());
    tokio::time::sleep(IDLE / 2).await;
    let begun = Instant::now();
    client.write_all(b"POST /next HTTP/1.1\r\n").await.unwrap();
    assert_408(&answer(&mut client).await);
    assert_eq!(begun.elapsed(), HEADER);
}

/// An h2c connection (its preface) is closed at the deadline without an HTTP/1 answer.
#[tokio::test(start_paused = true)]
async fn an_h2c_connection_gets_no_http1_answer() {
    let conn = Arc::new(Conn::default());
    let (mut client, _reader) = connection(&conn);
    client
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut client).await, "");
}

/// A body of `first` and then nothing, under a 3 s timeout.
fn stalling(
    first: &'static [u8],
    stalled: &Arc<AtomicBool>,
) -> TimedBody<impl hyper::body::Body<Data = Bytes, Error = std::io::Error> + Unpin> {
    let chunk = futures_util::stream::iter([Ok(Frame::data(Bytes::from_static(first)))]);
    let stream = futures_util::StreamExt::chain(chunk, futures_util::stream::pending());
    TimedBody::new(
        StreamBody::new(stream),
        Duration::from_secs(3),
        stalled.clone(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_stalled_body_fails_at_body_read_timeout_and_says_so() {
    let stalled = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let error = stalling(b"{\"amount\":", &stalled)
        .collect()
        .await
        .unwrap_err();
    assert!(error.is::<BodyReadTimeout>(), "{error}");
    assert!(stalled.load(SeqCst));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
}

/// Each chunk starts the timeout again: a slow body that never stalls that long is whole.
#[tokio::test(start_paused = true)]
async fn a_slow_body_that_keeps_coming_is_read_whole() {
    let stalled = Arc::new(AtomicBool::new(false));
    let chunks = futures_util::stream::unfold(0, |i| async move {
        if i == 5 {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        Some((
            Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"x"))),
            i + 1,
        ))
    });
    let body = TimedBody::new(
        StreamBody::new(Box::pin(chunks)),
        Duration::from_secs(3),
        stalled.clone(),
    );
    let whole = body.collect().await.unwrap().to_bytes();
    assert_eq!(whole, "xxxxx");
    assert!(!stalled.load(SeqCst));
}

#[test]
fn the_file_limit_is_read_and_the_need_counts_upstream_connections() {
    assert_eq!(files_needed(10_000, 2), 20_384);
    assert_eq!(files_needed(10_000, 1), 10_384);
    #[cfg(unix)]
    assert!(super::check_file_limit(1, 1).is_some_and(|limit| limit > 0));
}
