//! Per-principal limits through the layer, on the memory store: what is refused, what is
//! stored and forwarded, and when an in-flight slot is given back.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use idemgate_core::MemoryStore;
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::limits::{KeyRate, PrincipalLimits};
use idemgate_tower::{IdempotencyLayer, Policy, RoutePolicy};
use tokio::sync::{mpsc, Semaphore};
use tower::{service_fn, Layer, ServiceExt};

fn request(key: &str, who: &str) -> Request<BoxBody> {
    Request::post("/payments")
        .header("idempotency-key", key)
        .header("authorization", format!("Bearer {who}"))
        .body(full("{}".into()))
        .unwrap()
}

fn policy(limits: PrincipalLimits) -> Policy {
    Policy::default()
        .with_route("POST /payments", RoutePolicy::default().with_limits(limits))
        .unwrap()
}

/// An upstream that answers `201` once `gate` gives it a permit, counting calls and saying
/// on `started` when each call began.
#[derive(Clone)]
struct Upstream {
    calls: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
    started: mpsc::UnboundedSender<()>,
}

impl Upstream {
    fn new(permits: usize) -> (Self, mpsc::UnboundedReceiver<()>) {
        let (started, rx) = mpsc::unbounded_channel();
        let up = Self {
            calls: Arc::default(),
            gate: Arc::new(Semaphore::new(permits)),
            started,
        };
        (up, rx)
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn service(
        &self,
    ) -> impl tower::Service<
        Request<BoxBody>,
        Response = Response<BoxBody>,
        Error = std::convert::Infallible,
        Future: Send,
    > + Clone
           + Send
           + 'static {
        let up = self.clone();
        service_fn(move |_req: Request<BoxBody>| {
            let up = up.clone();
            async move {
                let n = up.calls.fetch_add(1, Ordering::SeqCst) + 1;
                let _ = up.started.send(());
                up.gate.acquire().await.unwrap().forget();
                let body = full(Bytes::from(format!("charge {n}")));
                Ok(Response::builder().status(201).body(body).unwrap())
            }
        })
    }
}

async fn text(resp: Response<BoxBody>) -> String {
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_burst_beyond_the_rate_gets_429_and_reaches_neither_store_nor_upstream() {
    let (up, _started) = Upstream::new(Semaphore::MAX_PERMITS);
    let store = Arc::new(MemoryStore::new());
    let limits = PrincipalLimits {
        max_in_flight: None,
        new_keys: Some(KeyRate::new(0.01, 3).unwrap()),
    };
    let svc = IdempotencyLayer::new(store.clone(), policy(limits)).layer(up.service());
    let mut limited = 0;
    // The next token is due in 100 s (one per 100 s, three taken from a burst of three).
    let mut last_retry_after = 100;
    for i in 0..20 {
        let resp = svc
            .clone()
            .oneshot(request(&format!("alice-key-{i:04}"), "alice"))
            .await
            .unwrap();
        match resp.status().as_u16() {
            201 => assert!(i < 3, "key {i} admitted"),
            429 => {
                assert!(i >= 3, "key {i} refused");
                let secs: u64 = resp.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=last_retry_after).contains(&secs), "{secs}");
                last_retry_after = secs;
                assert_eq!(resp.headers()["content-type"], "application/problem+json");
                assert!(text(resp)
                    .await
                    .contains("urn:idemgate:problem:principal-limited"));
                limited += 1;
            }
            s => panic!("key {i}: {s}"),
        }
    }
    assert_eq!(limited, 17);
    assert_eq!(up.calls(), 3, "the upstream saw exactly the admitted ones");
    assert_eq!(store.len(), 3, "nothing stored for the refused ones");
    // Another caller is not slowed by alice.
    for i in 0..3 {
        let resp = svc
            .clone()
            .oneshot(request(&format!("bob-key-{i:04}"), "bob"))
            .await
            .unwrap();
        assert_eq!(resp.status(), 201);
    }
    assert_eq!(up.calls(), 6);
}

#[tokio::test]
async fn replays_give_their_token_back() {
    let (up, _started) = Upstream::new(Semaphore::MAX_PERMITS);
    let limits = PrincipalLimits {
        max_in_flight: None,
        new_keys: Some(KeyRate::new(0.01, 2).unwrap()),
    };
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy(limits));
    let svc = layer.layer(up.service());
    let call = |key: &'static str| svc.clone().oneshot(request(key, "alice"));
    assert_eq!(call("key-first-1").await.unwrap().status(), 201);
    for _ in 0..10 {
        let replay = call("key-first-1").await.unwrap();
        assert_eq!(replay.headers()["idempotent-replayed"], "true");
        assert_eq!(text(replay).await, "charge 1");
    }
    assert_eq!(call("key-second").await.unwrap().status(), 201);
    assert_eq!(call("key-third1").await.unwrap().status(), 429);
    // With the bucket empty, the store is not asked: a replay waits too.
    assert_eq!(call("key-first-1").await.unwrap().status(), 429);
    assert_eq!(up.calls(), 2);
}

#[tokio::test]
async fn the_in_flight_slot_is_held_by_the_work_not_the_client() {
    let (up, mut started) = Upstream::new(0);
    let limits = PrincipalLimits {
        max_in_flight: NonZeroU32::new(1),
        new_keys: None,
    };
    let layer = IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy(limits));
    let svc = layer.layer(up.service());
    let first = tokio::spawn(svc.clone().oneshot(request("key-slow-01", "alice")));
    started.recv().await.unwrap();
    // The client goes away; the forwarded call still runs, and still holds the slot.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let second = svc
        .clone()
        .oneshot(request("key-slow-02", "alice"))
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "1");
    let bob = tokio::spawn(svc.clone().oneshot(request("key-bob-001", "bob")));
    started.recv().await.unwrap();
    assert_eq!(up.calls(), 2, "bob is admitted while alice is at her limit");
    // The work ends (its outcome written): the slot is free again.
    up.gate.add_permits(2);
    assert_eq!(bob.await.unwrap().unwrap().status(), 201);
    let tasks = layer.detached_tasks();
    tasks.close();
    tasks.wait().await;
    tasks.reopen();
    up.gate.add_permits(1);
    let third = svc.oneshot(request("key-slow-03", "alice")).await.unwrap();
    assert_eq!(third.status(), 201);
    assert_eq!(up.calls(), 3);
}

#[tokio::test]
async fn a_limited_request_is_refused_before_its_body_is_read() {
    let (up, _started) = Upstream::new(Semaphore::MAX_PERMITS);
    let limits = PrincipalLimits {
        max_in_flight: None,
        new_keys: Some(KeyRate::new(0.01, 1).unwrap()),
    };
    let svc =
        IdempotencyLayer::new(Arc::new(MemoryStore::new()), policy(limits)).layer(up.service());
    let body = |polled: Arc<AtomicBool>| {
        let chunk = futures_util::stream::once(async move {
            polled.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(Frame::data(Bytes::from_static(b"{}")))
        });
        StreamBody::new(chunk)
    };
    let req = |polled| {
        Request::post("/payments")
            .header("idempotency-key", "key-body-01")
            .header("authorization", "Bearer alice")
            .body(body(polled))
            .unwrap()
    };
    let admitted = Arc::new(AtomicBool::new(false));
    let resp = svc.clone().oneshot(req(admitted.clone())).await.unwrap();
    assert_eq!(resp.status(), 201);
    assert!(admitted.load(Ordering::SeqCst));
    let refused = Arc::new(AtomicBool::new(false));
    let resp = svc.oneshot(req(refused.clone())).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert!(!refused.load(Ordering::SeqCst), "the body was never read");
}

#[tokio::test]
async fn with_limits_off_nothing_is_refused() {
    let (up, _started) = Upstream::new(Semaphore::MAX_PERMITS);
    let svc =
        IdempotencyLayer::new(Arc::new(MemoryStore::new()), Policy::default()).layer(up.service());
    assert!(Policy::default().default_route().limits.is_off());
    let all = (0..200).map(|i| {
        svc.clone()
            .oneshot(request(&format!("key-off-{i:04}"), "alice"))
    });
    for resp in futures_util::future::join_all(all).await {
        assert_eq!(resp.unwrap().status(), 201);
    }
    assert_eq!(up.calls(), 200);
}
