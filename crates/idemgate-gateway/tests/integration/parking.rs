//! Parked HTTP/1 connections (issue 27): between requests a connection holds none of
//! hyper's buffers, and what it must keep doing holds: kept-alive requests answered in
//! turn, pipelined ones in order (whole, or with the next head split across the park), an
//! early answer's unread body never read as a request, `Connection: close` and HTTP/1.0
//! closing, a half head after the park answered `408`, a stop closing parked connections;
//! a request head over hyper's 64 KiB buffer is `431`.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;

use crate::support::*;

/// A connection read through a buffer: answers are read one at a time.
struct Client {
    read: BufReader<tokio::net::tcp::OwnedReadHalf>,
    write: OwnedWriteHalf,
}

impl Client {
    async fn connect(base: &str) -> Self {
        let tcp = TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .unwrap();
        let (read, write) = tcp.into_split();
        let read = BufReader::new(read);
        Self { read, write }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.unwrap();
    }

    /// The next answer's status line and head fields (lower-case names), its body read
    /// (`Content-Length` or chunked) and dropped.
    async fn answer(&mut self) -> (String, Vec<(String, String)>) {
        let mut status = String::new();
        let read = tokio::time::timeout(Duration::from_secs(10), self.read.read_line(&mut status));
        assert!(read.await.unwrap().unwrap() > 0, "closed before an answer");
        let mut fields = Vec::new();
        loop {
            let mut line = String::new();
            self.read.read_line(&mut line).await.unwrap();
            let Some((name, value)) = line.trim_end().split_once(':') else {
                break;
            };
            fields.push((name.to_ascii_lowercase(), value.trim().to_owned()));
        }
        let field = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        if field("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            self.skip_chunks().await;
        } else if let Some(length) = field("content-length") {
            let mut body = vec![0; length.parse().unwrap()];
            self.read.read_exact(&mut body).await.unwrap();
        }
        (status.trim_end().to_owned(), fields)
    }

    async fn skip_chunks(&mut self) {
        loop {
            let mut size = String::new();
            self.read.read_line(&mut size).await.unwrap();
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; size + 2];
            self.read.read_exact(&mut chunk).await.unwrap();
            if size == 0 {
                return;
            }
        }
    }

    /// Whether the server closes the connection within 10 s with nothing more to read.
    async fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), self.read.read_to_end(&mut rest));
        matches!(read.await, Ok(Ok(0)))
    }
}

/// A keyed `POST /payments` (HTTP/1.1 unless `version` says otherwise).
fn keyed(key: &str, version: &str, extra: &str) -> String {
    format!(
        "POST /payments HTTP/{version}\r\nhost: gw\r\nauthorization: Bearer alice\r\nidempotency-key: {key}\r\n\
         content-type: application/json\r\ncontent-length: 2\r\n{extra}\r\n{{}}"
    )
}

/// This process's count of parked service connections (every in-process gateway of the
/// test binary adds to it).
fn parks() -> f64 {
    let metrics = idemgate_gateway::telemetry::prometheus().unwrap().render();
    let series = "idempotency_connections_parked_total{listener=\"service\"} ";
    let value = metrics.lines().find_map(|l| l.strip_prefix(series));
    value.map_or(0.0, |v| v.parse().unwrap())
}

fn has(fields: &[(String, String)], name: &str, value: &str) -> bool {
    fields.iter().any(|(k, v)| k == name && v == value)
}

#[tokio::test]
async fn kept_alive_requests_are_served_in_turn_and_a_stop_closes_the_parked_connection() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    let mut client = Client::connect(&gw.base).await;
    let keys: Vec<String> = (0..3).map(|_| key()).collect();
    let before = parks();
    for k in &keys {
        client.send(keyed(k, "1.1", "").as_bytes()).await;
        assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    client.send(keyed(&keys[0], "1.1", "").as_bytes()).await;
    let (status, fields) = client.answer().await;
    assert_eq!(status, "HTTP/1.1 201 Created");
    assert!(has(&fields, "idempotent-replayed", "true"), "{fields:?}");
    assert_eq!(up.count(), 3);
    // Parked after each request idle 300 ms (at least once: a loaded machine's timers lag).
    assert!(parks() >= before + 1.0, "never parked");
    gw.stop().await;
    assert!(
        client.closed().await,
        "a parked connection closes at the stop"
    );
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_whole_or_split_across_the_park() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    let mut client = Client::connect(&gw.base).await;
    let (a, b, c, d, e) = (key(), key(), key(), key(), key());
    let two = keyed(&a, "1.1", "") + &keyed(&b, "1.1", "");
    client.send(two.as_bytes()).await;
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    let next = keyed(&d, "1.1", "");
    let (half, rest) = next.split_at(30);
    client.send((keyed(&c, "1.1", "") + half).as_bytes()).await;
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    let before = parks();
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Parked once with the half head kept, then waiting for its rest: not parked again (other
    // tests of this process park theirs meanwhile, a few).
    let parked = parks() - before;
    assert!(
        (1.0..200.0).contains(&parked),
        "{parked} parks while a half head waited"
    );
    client.send(rest.as_bytes()).await;
    let (status, fields) = client.answer().await;
    assert_eq!(status, "HTTP/1.1 201 Created");
    assert!(!has(&fields, "connection", "close"), "{fields:?}");
    client.send(keyed(&e, "1.1", "").as_bytes()).await;
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    assert_eq!(up.count(), 5, "each ran once");
    gw.stop().await;
}

#[tokio::test]
async fn an_unread_body_after_an_early_answer_is_never_read_as_a_request() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("max_body_bytes", 64)
    })
    .await;
    let mut client = Client::connect(&gw.base).await;
    let smuggled = keyed(&key(), "1.1", "");
    let head = format!(
        "POST /payments HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer alice\r\n\
         idempotency-key: {}\r\ncontent-length: {}\r\n\r\n",
        key(),
        smuggled.len()
    );
    client.send(head.as_bytes()).await;
    let (status, _) = client.answer().await;
    assert!(
        status.starts_with("HTTP/1.1 413 "),
        "by Content-Length: {status}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = client.write.write_all(smuggled.as_bytes()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(up.count(), 0, "the body was run as a request");
    gw.stop().await;
}

#[tokio::test]
async fn connection_close_and_http_1_0_end_the_connection_after_the_answer() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    for (version, extra) in [("1.1", "connection: close\r\n"), ("1.0", "")] {
        let mut client = Client::connect(&gw.base).await;
        client.send(keyed(&key(), version, extra).as_bytes()).await;
        assert!(client.answer().await.0.ends_with(" 201 Created"));
        assert!(client.closed().await, "HTTP/{version} {extra}");
    }
    let mut client = Client::connect(&gw.base).await;
    for _ in 0..2 {
        let k = key();
        client
            .send(keyed(&k, "1.0", "connection: keep-alive\r\n").as_bytes())
            .await;
        assert_eq!(client.answer().await.0, "HTTP/1.0 201 Created");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(up.count(), 4);
    gw.stop().await;
}

#[tokio::test]
async fn a_half_head_after_a_parked_wait_is_answered_408_at_header_read_timeout() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.header_read_timeout = "1s".into();
        c.idle_timeout = "20s".into();
    })
    .await;
    let mut client = Client::connect(&gw.base).await;
    client.send(keyed(&key(), "1.1", "").as_bytes()).await;
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    tokio::time::sleep(Duration::from_millis(300)).await;
    client
        .send(b"POST /payments HTTP/1.1\r\nhost: gw\r\n")
        .await;
    let since = tokio::time::Instant::now();
    assert!(client.answer().await.0.starts_with("HTTP/1.1 408 "));
    assert!(
        since.elapsed() <= Duration::from_secs(3),
        "{:?}",
        since.elapsed()
    );
    assert!(client.closed().await);
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn a_request_head_over_64_kib_is_431_and_a_head_under_it_is_served() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    for (size, status) in [
        (60 << 10, "HTTP/1.1 201 Created"),
        (70 << 10, "HTTP/1.1 431 "),
    ] {
        let mut client = Client::connect(&gw.base).await;
        let extra = format!("x-pad: {}\r\n", "p".repeat(size));
        let _ = client
            .write
            .write_all(keyed(&key(), "1.1", &extra).as_bytes())
            .await;
        let (got, _) = client.answer().await;
        assert!(got.starts_with(status), "{size} bytes: {got}");
    }
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn the_first_byte_of_a_head_sent_with_the_last_request_is_bounded_and_the_stop_ends_it() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.header_read_timeout = "1s".into();
        c.idle_timeout = "2s".into();
    })
    .await;
    let mut client = Client::connect(&gw.base).await;
    let mut idle = Client::connect(&gw.base).await;
    client
        .send((keyed(&key(), "1.1", "") + "P").as_bytes())
        .await;
    idle.send((keyed(&key(), "1.1", "") + "P").as_bytes()).await;
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    assert_eq!(idle.answer().await.0, "HTTP/1.1 201 Created");
    let since = tokio::time::Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read.read_to_end(&mut rest));
    assert!(matches!(read.await, Ok(Ok(_))), "closed by a deadline");
    assert!(
        since.elapsed() <= Duration::from_secs(5),
        "{:?}",
        since.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The other is stopped before its deadline: the stop does not wait for it.
    let stopping = tokio::time::Instant::now();
    gw.stop().await;
    assert!(
        stopping.elapsed() <= Duration::from_secs(3),
        "{:?}",
        stopping.elapsed()
    );
    assert_eq!(up.count(), 2);
}

#[tokio::test]
async fn a_pipelined_request_is_never_answered_close_on_a_connection_kept_open() {
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |_| {}).await;
    let mut client = Client::connect(&gw.base).await;
    let slow = keyed(&key(), "1.1", "").replace("/payments ", "/payments?delay_ms=300 ");
    client
        .send((keyed(&key(), "1.1", "") + &slow).as_bytes())
        .await;
    for _ in 0..2 {
        let (status, fields) = client.answer().await;
        assert_eq!(status, "HTTP/1.1 201 Created");
        assert!(!has(&fields, "connection", "close"), "{fields:?}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.send(keyed(&key(), "1.1", "").as_bytes()).await;
    assert_eq!(client.answer().await.0, "HTTP/1.1 201 Created");
    assert_eq!(up.count(), 3);
    gw.stop().await;
}
