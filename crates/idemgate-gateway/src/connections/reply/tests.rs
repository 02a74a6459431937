//! What a response gets at the top (`Content-Length`, `HEAD`, `CONNECT`), and a service that
//! is not ready at once, answered over a real socket.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{top_level, Asked};
use crate::connections::{serve, Limits, Listening, SERVICE};

fn answer(status: u16, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
}

async fn text(response: Response<Body>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn streamed() -> Body {
    let chunks = [Ok::<_, Infallible>(Frame::data(Bytes::from("hello")))];
    Body::new(StreamBody::new(stream::iter(chunks)))
}

#[tokio::test]
async fn a_body_of_exact_size_gets_its_length_and_a_stated_one_is_kept() {
    let sized = top_level(answer(201, Body::from("hello")), Asked::Other);
    assert_eq!(sized.headers()[CONTENT_LENGTH], "5");
    assert_eq!(text(sized).await, "hello");
    let empty = top_level(answer(204, Body::empty()), Asked::Other);
    assert_eq!(empty.headers()[CONTENT_LENGTH], "0");
    let mut stated = answer(200, streamed());
    stated.headers_mut().insert(CONTENT_LENGTH, 5.into());
    let stated = top_level(stated, Asked::Other);
    assert_eq!(stated.headers().get_all(CONTENT_LENGTH).iter().count(), 1);
    let streaming = top_level(answer(200, streamed()), Asked::Other);
    assert!(!streaming.headers().contains_key(CONTENT_LENGTH));
    assert_eq!(text(streaming).await, "hello");
}

#[tokio::test]
async fn a_head_answer_keeps_its_headers_loses_its_body_and_gets_no_made_up_length() {
    let mut stated = answer(200, Body::from("hello"));
    stated.headers_mut().insert(CONTENT_LENGTH, 115.into());
    let head = top_level(stated, Asked::Head);
    assert_eq!(head.headers()[CONTENT_LENGTH], "115");
    assert_eq!(text(head).await, "");
    // An upstream's answer to HEAD has an empty body, whatever the resource's size.
    for body in [Body::empty(), streamed()] {
        let head = top_level(answer(200, body), Asked::Head);
        assert!(!head.headers().contains_key(CONTENT_LENGTH), "{head:?}");
        assert_eq!(text(head).await, "");
    }
}

#[tokio::test]
async fn a_successful_connect_is_answered_without_a_body_or_its_framing() {
    let tunnel = top_level(answer(200, Body::from("hello")), Asked::Connect);
    assert!(!tunnel.headers().contains_key(CONTENT_LENGTH));
    assert_eq!(text(tunnel).await, "");
    for (name, value) in [(CONTENT_LENGTH, "0"), (TRANSFER_ENCODING, "chunked")] {
        let mut framed = answer(204, Body::empty());
        framed
            .headers_mut()
            .insert(name.clone(), value.parse().unwrap());
        let framed = top_level(framed, Asked::Connect);
        assert!(!framed.headers().contains_key(name), "{framed:?}");
    }
    // A refusal is an ordinary answer: its body and length stay.
    let refused = top_level(answer(407, Body::from("who?")), Asked::Connect);
    assert_eq!(refused.headers()[CONTENT_LENGTH], "4");
    assert_eq!(text(refused).await, "who?");
}

/// A service ready at its third `poll_ready` (the first is the listener's own, with no
/// waker to wake); it records how many polls preceded its call.
#[derive(Clone, Default)]
struct ReadyThird {
    polls: Arc<AtomicUsize>,
    called_after: Arc<AtomicUsize>,
}

impl tower::Service<Request<Body>> for ReadyThird {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if self.polls.fetch_add(1, SeqCst) < 2 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        self.called_after.store(self.polls.load(SeqCst), SeqCst);
        std::future::ready(Ok(Response::new(Body::from("readied"))))
    }
}

#[tokio::test]
async fn a_service_not_ready_at_once_is_waited_for_and_then_called() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = ReadyThird::default();
    let conf = Listening::new(SERVICE, Limits::default(), "urn:idemgate:problem:");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, app.clone(), conf, async move {
        let _ = stopped.await;
    }));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut read = Vec::new();
    let within = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut read));
    within.await.expect("answered").unwrap();
    let read = String::from_utf8(read).unwrap();
    assert!(read.starts_with("HTTP/1.1 200 OK\r\n"), "{read}");
    assert!(read.contains("\r\ncontent-length: 7\r\n"), "{read}");
    assert!(read.ends_with("\r\n\r\nreadied"), "{read}");
    assert_eq!(
        app.called_after.load(SeqCst),
        3,
        "called once ready, not before"
    );
    let _ = stop.send(());
    server.await.unwrap();
}
