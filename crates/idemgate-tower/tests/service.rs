//! The middleware's tower-http shape: its accessors, and uncovered requests passed to the
//! inner service's own future (not boxed).

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use idemgate_core::MemoryStore;
use idemgate_tower::body::{full, BoxBody};
use idemgate_tower::{Idempotency, IdempotencyLayer, Policy};
use tower::{service_fn, Layer, Service, ServiceExt};

#[derive(Clone, Debug)]
struct Named(&'static str);

impl Service<Request<BoxBody>> for Named {
    type Response = Response<BoxBody>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<BoxBody>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<BoxBody>) -> Self::Future {
        std::future::ready(Ok(Response::new(full(self.0.into()))))
    }
}

#[tokio::test]
async fn the_inner_service_is_reachable_and_uncovered_calls_are_not_boxed() {
    let mut svc = Idempotency::new(Named("a"), MemoryStore::new(), Policy::default());
    assert_eq!(svc.get_ref().0, "a");
    svc.get_mut().0 = "b";
    ServiceExt::<Request<BoxBody>>::ready(&mut svc)
        .await
        .unwrap();
    let get = svc.call(Request::get("/payments").body(full("".into())).unwrap());
    assert_eq!(
        format!("{get:?}"),
        r#"ResponseFuture { kind: "pass-through" }"#
    );
    let body = http_body_util::BodyExt::collect(get.await.unwrap().into_body());
    assert_eq!(body.await.unwrap().to_bytes(), "b");
    ServiceExt::<Request<BoxBody>>::ready(&mut svc)
        .await
        .unwrap();
    let post = Request::post("/payments")
        .header("idempotency-key", "service-key-0001")
        .header("authorization", "Bearer alice")
        .body(full("{}".into()))
        .unwrap();
    let post = svc.call(post);
    assert_eq!(format!("{post:?}"), r#"ResponseFuture { kind: "covered" }"#);
    assert_eq!(post.await.unwrap().status(), 200);
    assert_eq!(svc.into_inner().0, "b");
}

#[tokio::test]
async fn drain_waits_for_work_whose_client_left() {
    let layer: IdempotencyLayer<MemoryStore> =
        Idempotency::<(), _>::layer(MemoryStore::new(), Policy::default());
    let slow = service_fn(|_req: Request<BoxBody>| async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, Infallible>(Response::new(full("done".into())))
    });
    let svc = layer.layer(slow);
    let req = Request::post("/payments")
        .header("idempotency-key", "drain-key-000001")
        .header("authorization", "Bearer alice")
        .body(full("{}".into()))
        .unwrap();
    // The client leaves after 50 ms; the operation goes on in its detached task.
    let gone = tokio::time::timeout(Duration::from_millis(50), svc.oneshot(req)).await;
    assert!(gone.is_err());
    assert_eq!(layer.detached_tasks().len(), 1);
    tokio::time::timeout(Duration::from_secs(5), layer.drain())
        .await
        .unwrap();
    assert_eq!(
        layer.detached_tasks().len(),
        0,
        "drain returned once it ended"
    );
}
