//! Fingerprints of bodies an upstream reads one way only: gzip with several members or
//! trailing bytes, multipart forms under new or other boundaries, and inflation bombs.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::*;

fn gzip(members: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in members {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(m).unwrap();
        out.extend(enc.finish().unwrap());
    }
    out
}

/// A POST of `body` as `user` with `key`, `content_type` and an optional encoding.
fn send(
    base: &str,
    user: &str,
    key: &str,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> reqwest::RequestBuilder {
    let mut rb = client()
        .post(format!("{base}/payments"))
        .header("authorization", format!("Bearer {user}"))
        .header("idempotency-key", key)
        .header("content-type", content_type)
        .body(body);
    if let Some(e) = encoding {
        rb = rb.header("content-encoding", e);
    }
    rb
}

async fn gzipped(gw: &Gateway, key: &str, body: Vec<u8>) -> reqwest::Response {
    let ct = "application/json";
    send(&gw.base, "alice", key, ct, Some("gzip"), body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn every_gzip_member_and_trailing_byte_counts() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let first = br#"{"amount":10}"#;
    let (k, two) = (key(), gzip(&[first, br#"{"to":"bob"}"#]));
    assert_eq!(gzipped(&gw, &k, two.clone()).await.status(), 201);
    let other_second = gzip(&[first, br#"{"to":"eve"}"#]);
    assert_problem(
        gzipped(&gw, &k, other_second).await,
        422,
        "fingerprint-mismatch",
    )
    .await;
    let retry = gzipped(&gw, &k, two).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1, "the first request ran once");

    let trailing = |t: &[u8]| [&gzip(&[first])[..], t].concat();
    let k = key();
    assert_eq!(gzipped(&gw, &k, trailing(b"garbage")).await.status(), 201);
    let other = gzipped(&gw, &k, trailing(b"GARBAGE")).await;
    assert_problem(other, 422, "fingerprint-mismatch").await;
    let plain = gzipped(&gw, &k, gzip(&[first])).await;
    assert_problem(plain, 422, "fingerprint-mismatch").await;
    let retry = gzipped(&gw, &k, trailing(b"garbage")).await;
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 2);
    gw.stop().await;
}

/// A form with the same two parts under `boundary`, as curl sends it.
fn form(boundary: &str) -> (String, Vec<u8>) {
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n10\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"receipt\"; filename=\"r.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nline 1\r\nline 2\r\n--{boundary}--\r\n"
    );
    (
        format!("multipart/form-data; boundary={boundary}"),
        body.into_bytes(),
    )
}

#[tokio::test]
async fn a_form_retried_under_a_new_boundary_replays() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    let (ct, body) = form("------------------------a1b2c3d4e5f60718");
    let first = send(&gw.base, "alice", &k, &ct, None, body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let (ct, body) = form("------------------------9f8e7d6c5b4a3921");
    let retry = send(&gw.base, "alice", &k, &ct, None, body)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn the_same_bytes_under_another_boundary_are_another_request() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let k = key();
    // split at `--XYZ` these bytes are a two-part form; at `--XY` they are no form at all
    let (ct, body) = form("XYZ");
    let first = send(&gw.base, "alice", &k, &ct, None, body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 201);
    let other_ct = "multipart/form-data; boundary=XY";
    let other = send(&gw.base, "alice", &k, other_ct, None, body.clone())
        .send()
        .await
        .unwrap();
    assert_problem(other, 422, "fingerprint-mismatch").await;
    let quoted = "multipart/form-data; boundary=\"XYZ\"";
    let same = send(&gw.base, "alice", &k, quoted, None, body)
        .send()
        .await
        .unwrap();
    assert_eq!(same.headers()["idempotent-replayed"], "true");
    assert_eq!(up.count(), 1);
    gw.stop().await;
}

#[tokio::test]
async fn inflation_bombs_get_413_and_other_callers_do_not_wait_for_them() {
    const BOMBS: usize = 16;
    let up = upstream().await;
    let gw = gateway(&up.base, "memory://", |c| {
        c.defaults.set("max_decoded_body_bytes", 16 << 20);
    })
    .await;
    // ~16 KiB on the wire, 32 MiB decoded: decoding stops at 16 MiB
    let bomb = gzip(&[&vec![0u8; 32 << 20]]);
    assert!(bomb.len() < 64 << 10);
    let done = Arc::new(AtomicUsize::new(0));
    let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<()>(BOMBS);
    let mut bombs = Vec::new();
    for _ in 0..BOMBS {
        let req = send(
            &gw.base,
            "mallory",
            &key(),
            "application/json",
            Some("gzip"),
            bomb.clone(),
        );
        let (done, tx) = (done.clone(), first_tx.clone());
        bombs.push(tokio::spawn(async move {
            let resp = req.send().await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(()).await;
            resp
        }));
    }
    // The bombs are being decoded once the first of them has been answered.
    first_rx.recv().await.unwrap();
    for i in 0..5 {
        let body = format!(r#"{{"amount":{i}}}"#).into_bytes();
        let small = send(&gw.base, "bob", &key(), "application/json", None, body);
        assert_eq!(small.send().await.unwrap().status(), 201);
    }
    let answered = done.load(Ordering::SeqCst);
    assert!(
        answered < BOMBS,
        "bob's requests finished while bombs were still being decoded ({answered} of {BOMBS} answered)"
    );
    for b in bombs {
        let resp = b.await.unwrap();
        let problem = assert_problem(resp, 413, "body-too-large").await;
        assert!(
            problem["detail"].as_str().unwrap().contains("decoded"),
            "{problem}"
        );
    }
    assert_eq!(up.count(), 5, "no bomb was forwarded");
    gw.stop().await;
}

/// Names a parser reads as one name (`amount`, `%61mount`) keep their order, in forms and in
/// query strings; reordering distinct names still replays.
#[tokio::test]
async fn names_read_as_one_keep_their_order() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let ct = "application/x-www-form-urlencoded";
    let form = |k: &str, body: &str| send(&gw.base, "alice", k, ct, None, body.into());
    let k = key();
    let first = form(&k, "amount=100&%61mount=999").send().await.unwrap();
    assert_eq!(first.status(), 201);
    let swapped = form(&k, "%61mount=999&amount=100").send().await.unwrap();
    assert_problem(swapped, 422, "fingerprint-mismatch").await;
    let k = key();
    assert_eq!(
        form(&k, "to=bob&amount=1").send().await.unwrap().status(),
        201
    );
    let reordered = form(&k, "amount=1&to=bob").send().await.unwrap();
    assert_eq!(reordered.headers()["idempotent-replayed"], "true");

    let query = |k: &str, q: &str| {
        client()
            .post(format!("{}/payments?{q}", gw.base))
            .header("authorization", "Bearer alice")
            .header("idempotency-key", k)
            .send()
    };
    let k = key();
    assert_eq!(
        query(&k, "amount=100&%61mount=999").await.unwrap().status(),
        201
    );
    let swapped = query(&k, "%61mount=999&amount=100").await.unwrap();
    assert_problem(swapped, 422, "fingerprint-mismatch").await;
    assert_eq!(up.count(), 3, "each first request ran once");
    gw.stop().await;
}

/// RFC 2231 parameters (`boundary*`, `name*`), which parsers read differently, make the body
/// count as sent: another form hidden behind them is another request.
#[tokio::test]
async fn extended_parameters_make_a_form_count_as_sent() {
    let up = upstream().await;
    let gw = memory_gateway(&up).await;
    let part = |b: &str, amount: &str| {
        format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"amount\"\r\n\r\n{amount}\r\n--{b}--\r\n"
        )
    };
    let k = key();
    let one = [part("YY", "100"), part("XX", "x")].concat();
    let ct = |b: &str| format!("multipart/form-data; boundary={b}; boundary*=utf-8''YY");
    let first = send(&gw.base, "alice", &k, &ct("XX"), None, one.clone().into());
    assert_eq!(first.send().await.unwrap().status(), 201);
    let other = [part("YY", "999"), part("QQ", "x")].concat();
    let second = send(&gw.base, "alice", &k, &ct("QQ"), None, other.into());
    assert_problem(second.send().await.unwrap(), 422, "fingerprint-mismatch").await;
    let retry = send(&gw.base, "alice", &k, &ct("XX"), None, one.into());
    assert_eq!(
        retry.send().await.unwrap().headers()["idempotent-replayed"],
        "true"
    );
    assert_eq!(up.count(), 1);
    gw.stop().await;
}
