//! The retrying client (`idemgate-retry`) through a gateway crash: the gateway holding the
//! first attempt is killed (SIGKILL) while the upstream runs it, another starts on the same
//! store and port, and the client, retrying with the same key, ends on `outcome-unknown`
//! without a second execution.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_retry::{IdempotentRetryLayer, RetryPolicy};
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::support::{spawn_binary_on, upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_stops_on_outcome_unknown_after_a_gateway_crash() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    let db = dir.path().join("records.db");
    std::fs::write(
        &config,
        format!(
            "store = \"sqlite://{}\"\n[defaults]\nlease_ttl = \"1s\"\n",
            db.display()
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let mut first = spawn_binary_on(&listen, &up.base, &config).await;

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut client = ServiceBuilder::new()
        .layer(IdempotentRetryLayer::new(RetryPolicy {
            attempt_timeout: Duration::from_millis(500),
            deadline: Duration::from_secs(20),
            max_backoff: Duration::from_millis(500),
            ..RetryPolicy::default()
        }))
        .service(client);
    let req = http::Request::post(format!("http://{listen}/payments?delay_ms=3000"))
        .header("authorization", "Bearer alice")
        .body(Full::new(Bytes::from_static(b"{\"amount\":1000}")))
        .unwrap();
    let call = tokio::spawn(async move { client.ready().await.unwrap().call(req).await });

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(up.count(), 1, "the first attempt reached the upstream");
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let _second = spawn_binary_on(&listen, &up.base, &config).await;

    let resp = call.await.unwrap().expect("an answer");
    assert_eq!(resp.status(), 500);
    let body: serde_json::Value =
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["type"], "urn:idemgate:problem:outcome-unknown");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(up.count(), 1, "never a second execution");
}
