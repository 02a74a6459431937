use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// A connected pair: (the client's end, the server's end wrapped in `linger`).
async fn pair(linger: Linger) -> (TcpStream, Lingering<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    (client, Lingering::new(server, linger))
}

const LONG: Duration = Duration::from_secs(3600);

/// Shuts `server` down; the test fails if that takes longer than a minute (it would hang
/// without a bound).
async fn shut(mut server: Lingering<TcpStream>) {
    tokio::time::timeout(Duration::from_secs(60), server.shutdown())
        .await
        .expect("the linger ended within its bound")
        .unwrap();
}

#[tokio::test]
async fn the_answer_and_a_fin_go_out_before_the_rest_of_the_body_is_read() {
    let (mut client, mut server) = pair(Linger::default()).await;
    server.write_all(b"HTTP/1.1 413 \r\n\r\n").await.unwrap();
    let shutdown = tokio::spawn(shut(server));
    // 4 MiB: more than both socket buffers hold, so without the linger the write would
    // block forever (and a close would reset it).
    client.write_all(&vec![b'x'; 4 << 20]).await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"HTTP/1.1 413 \r\n\r\n");
    drop(client);
    shutdown.await.unwrap();
}

#[tokio::test]
async fn a_client_that_keeps_sending_is_cut_off_by_the_byte_bound() {
    let linger = Linger {
        max_time: LONG,
        idle: LONG,
        max_bytes: 1 << 20,
    };
    let (mut client, server) = pair(linger).await;
    let flood = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 << 10];
        let mut sent = 0u64;
        while client.write_all(&chunk).await.is_ok() {
            sent += chunk.len() as u64;
            assert!(sent < 1 << 30, "the gateway kept reading past its bound");
        }
    });
    shut(server).await;
    // The server's end is closed: the flood ends with a write error.
    tokio::time::timeout(Duration::from_secs(60), flood)
        .await
        .expect("the client's writes fail once the connection is closed")
        .unwrap();
}

/// The client never stops and never closes, and neither the idle nor the byte bound can
/// end the linger: only the time bound does (else `shut` fails after a minute).
#[tokio::test]
async fn a_slow_client_is_cut_off_by_the_time_bound() {
    let linger = Linger {
        max_time: Duration::from_millis(300),
        idle: LONG,
        max_bytes: u64::MAX,
    };
    let (mut client, server) = pair(linger).await;
    let drip = tokio::spawn(async move {
        while client.write_all(b"x").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    shut(server).await;
    tokio::time::timeout(Duration::from_secs(60), drip)
        .await
        .expect("the client's writes fail once the connection is closed")
        .unwrap();
}

#[tokio::test]
async fn a_silent_client_is_cut_off_by_the_idle_bound() {
    let linger = Linger {
        max_time: LONG,
        idle: Duration::from_millis(100),
        max_bytes: u64::MAX,
    };
    let (mut client, server) = pair(linger).await;
    shut(server).await;
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the client got the FIN");
}
