//! What sealing at rest costs a request: one `Keyring::seal` on a fresh key's outcome, one
//! `Keyring::open` on a replay, for responses of 256 B to 16 KiB. Run on purpose, in release:
//!
//! ```text
//! cargo run --release -p idemgate-core --example seal_cost
//! ```
//!
//! Prints, per size, the median over 9 rounds of the time per seal and per open (each round
//! times 2,000 of them).

use tokio::time::Instant;

use bytes::Bytes;
use idemgate_core::seal::Keyring;
use idemgate_core::{IdempotencyKey, ScopedKey, StoredResponse};

fn main() {
    let rounds: usize = std::env::var("SEAL_COST_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(9);
    let ring = Keyring::new(vec![std::array::from_fn(|i| i as u8 * 7 + 1)]).unwrap();
    let key = ScopedKey {
        principal: "sha256:0123456789abcdef".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new("a3f1c9e2-7b4d-4e8a-9c1f-2d5e6b7a8c9d").unwrap(),
    };
    println!("body bytes  seal µs  open µs  (median of {rounds} rounds of 2,000)");
    for size in [256usize, 1024, 4096, 16384] {
        let clear = StoredResponse {
            status: 201,
            headers: vec![
                (
                    "content-type".into(),
                    Bytes::from_static(b"application/json"),
                ),
                ("location".into(), Bytes::from_static(b"/payments/pay_1")),
            ],
            body: (0..size).map(|i| b'a' + (i % 26) as u8).collect(),
            replayable: true,
            sealed_by: None,
        };
        let sealed = ring.seal(&key, 1, &clear);
        let (mut seal, mut open) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..2000 {
                std::hint::black_box(ring.seal(&key, 1, std::hint::black_box(&clear)));
            }
            seal.push(t.elapsed().as_secs_f64() * 1e6 / 2000.0);
            let t = Instant::now();
            for _ in 0..2000 {
                let r = ring.open(&key, 1, std::hint::black_box(sealed.clone()));
                std::hint::black_box(r.unwrap());
            }
            open.push(t.elapsed().as_secs_f64() * 1e6 / 2000.0);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{size:>10}  {:>7.2}  {:>7.2}",
            median(&mut seal),
            median(&mut open)
        );
    }
}
