//! TLS: an `https://` upstream reached through the gateway, a client reaching the gateway
//! over TLS, and the configuration errors naming their field. Certificates are generated
//! here (rcgen), self-signed for `localhost` and `127.0.0.1`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::Router;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_gateway::config::Config;
use idemgate_gateway::tls::{client_config, server_config, TlsListener};

use crate::support::{assert_problem, gateway, key, post, upstream};

/// A self-signed certificate and its key, written as PEM files in `dir`.
fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

#[derive(Clone, Default)]
struct Seen {
    executions: Arc<AtomicUsize>,
    proto: Arc<Mutex<Option<String>>>,
}

/// An upstream serving HTTPS with `cert`/`key`; answers `201` with its execution count.
async fn https_upstream(cert: &Path, key: &Path) -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let seen = Seen::default();
    let app = Router::new()
        .fallback(|State(seen): State<Seen>, headers: HeaderMap| async move {
            let n = seen.executions.fetch_add(1, Ordering::SeqCst) + 1;
            let proto = headers
                .get("x-forwarded-proto")
                .map(|v| v.to_str().unwrap().to_owned());
            *seen.proto.lock().unwrap() = proto;
            (
                axum::http::StatusCode::CREATED,
                format!("{{\"execution\":{n}}}"),
            )
        })
        .with_state(seen.clone());
    let tls = TlsListener::new(listener, server_config(cert, key).unwrap());
    tokio::spawn(async move { axum::serve(tls, app).await });
    (base, seen)
}

#[tokio::test]
async fn an_https_upstream_is_reached_with_the_configured_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key_file) = self_signed(dir.path());
    let (base, seen) = https_upstream(&cert, &key_file).await;
    let ca = cert.display().to_string();
    let gw = gateway(&base, "memory://", |c| c.upstream_ca_file = ca).await;
    let k = key();
    let first = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    assert_eq!(first.text().await.unwrap(), "{\"execution\":1}");
    let retry = post(&gw.base, "/payments", Some(&k), "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(seen.executions.load(Ordering::SeqCst), 1, "ran once");
    assert_eq!(seen.proto.lock().unwrap().as_deref(), Some("http"));
    gw.stop().await;
}

#[tokio::test]
async fn an_https_upstream_with_an_untrusted_certificate_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key_file) = self_signed(dir.path());
    let (base, seen) = https_upstream(&cert, &key_file).await;
    // Another CA than the one that signed the upstream's certificate.
    let other = tempfile::tempdir().unwrap();
    let (other_ca, _) = self_signed(other.path());
    let ca = other_ca.display().to_string();
    let gw = gateway(&base, "memory://", |c| c.upstream_ca_file = ca).await;
    let resp = post(&gw.base, "/payments", Some(&key()), "{}")
        .send()
        .await
        .unwrap();
    assert_problem(resp, 502, "upstream-unreachable").await;
    assert_eq!(
        seen.executions.load(Ordering::SeqCst),
        0,
        "the handshake failed first"
    );
    gw.stop().await;
}

#[tokio::test]
async fn clients_reach_the_gateway_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key_file) = self_signed(dir.path());
    let up = upstream().await;
    let (c, k) = (cert.display().to_string(), key_file.display().to_string());
    let gw = gateway(&up.base, "memory://", |cfg| {
        cfg.tls_cert_file = c;
        cfg.tls_key_file = k;
    })
    .await;
    let https_base = gw.base.replace("http://", "https://");
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*client_config(Some(&cert)).unwrap()).clone())
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    // A client that connects and never starts its handshake does not hold up the others.
    let silent = tokio::net::TcpStream::connect(gw.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let k = key();
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let req = http::Request::post(format!("{https_base}/payments"))
            .header("authorization", "Bearer alice")
            .header("idempotency-key", &k)
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert_eq!(resp.status(), 201);
        bodies.push(resp.into_body().collect().await.unwrap().to_bytes());
    }
    assert_eq!(bodies[0], bodies[1], "the retry got the stored response");
    assert_eq!(up.count(), 1);
    assert_eq!(up.last_headers()["x-forwarded-proto"], "https");
    // Plain HTTP on the TLS listener gets no HTTP answer.
    let plain = post(&gw.base, "/payments", Some(&key()), "{}").send().await;
    assert!(plain.is_err(), "{plain:?}");
    assert_eq!(up.count(), 1);
    // Served while the silent client's handshake was still pending (not after it timed out
    // and was closed).
    let mut buf = [0u8; 1];
    let pending = silent.try_read(&mut buf);
    assert!(
        matches!(&pending, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "{pending:?}"
    );
    drop(silent);
    gw.stop().await;
}

fn errors(edit: impl FnOnce(&mut Config)) -> String {
    let mut c = Config {
        upstream: "https://127.0.0.1:1".into(),
        ..Config::default()
    };
    edit(&mut c);
    c.validate().unwrap_err().join("\n")
}

#[test]
fn tls_file_errors_name_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key_file) = self_signed(dir.path());
    let missing = dir.path().join("missing.pem").display().to_string();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let not_pem = not_pem.display().to_string();
    let (cert, key_file) = (cert.display().to_string(), key_file.display().to_string());

    let e = errors(|c| {
        c.tls_cert_file = missing.clone();
        c.tls_key_file = key_file.clone();
    });
    assert!(
        e.contains("tls_cert_file: cannot read") && e.contains("missing.pem"),
        "{e}"
    );
    let e = errors(|c| {
        c.tls_cert_file = cert.clone();
        c.tls_key_file = not_pem.clone();
    });
    assert!(
        e.contains("tls_key_file:") && e.contains("no PEM private key"),
        "{e}"
    );
    let e = errors(|c| {
        c.tls_cert_file = not_pem.clone();
        c.tls_key_file = key_file.clone();
    });
    assert!(
        e.contains("tls_cert_file:") && e.contains("CERTIFICATE"),
        "{e}"
    );
    let e = errors(|c| c.tls_cert_file = cert.clone());
    assert!(e.contains("tls_key_file: missing"), "{e}");
    let e = errors(|c| c.upstream_ca_file = missing.clone());
    assert!(e.contains("upstream_ca_file: cannot read"), "{e}");
    // A key that is not the certificate's.
    let other = tempfile::tempdir().unwrap();
    let (_, other_key) = self_signed(other.path());
    let e = errors(|c| {
        c.tls_cert_file = cert.clone();
        c.tls_key_file = other_key.display().to_string();
    });
    assert!(e.contains("tls_key_file: does not fit"), "{e}");
}
