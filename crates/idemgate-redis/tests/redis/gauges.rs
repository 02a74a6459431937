//! The store gauges: exact from a scan of the prefix on a small database, sampled past
//! [`SCAN_ALL_BELOW`] keys; other programs' keys under the prefix are skipped.

use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{GaugedStore, IdempotencyStore};
use idemgate_redis::SCAN_ALL_BELOW;

use crate::{common, DAY};

/// Filler keys under a prefix of their own, deleted on drop.
struct Filler {
    url: String,
    prefix: String,
    count: usize,
}

impl Filler {
    async fn new(url: &str, count: usize) -> Self {
        let prefix = common::prefix();
        let mut conn = common::raw(url).await;
        for start in (0..count).step_by(1000) {
            let mut pipe = redis::pipe();
            for i in start..(start + 1000).min(count) {
                pipe.cmd("SET")
                    .arg(format!("{prefix}filler:{i}"))
                    .arg("x")
                    .arg("EX")
                    .arg(600)
                    .ignore();
            }
            let _: () = pipe.query_async(&mut conn).await.unwrap();
        }
        Self {
            url: url.to_owned(),
            prefix,
            count,
        }
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = (0..self.count)
            .map(|i| format!("{}filler:{i}", self.prefix))
            .collect();
        for chunk in keys.chunks(1000) {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(chunk).query(&mut conn);
        }
    }
}

/// `n` completed records (10-byte bodies) in `s`.
async fn completed(s: &common::TestStore, n: u64) {
    for _ in 0..n {
        let k = unique_key("alice");
        let lease = inserted(
            s.insert_or_get(&request(&k, fp(1), DAY / 2, DAY))
                .await
                .unwrap(),
        );
        s.complete(&lease, &response(10)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_database_is_counted_exactly_and_foreign_keys_are_skipped() {
    let Some(s) = common::fresh_store().await else {
        return;
    };
    let done = unique_key("alice");
    let lease = inserted(
        s.insert_or_get(&request(&done, fp(1), DAY / 2, DAY))
            .await
            .unwrap(),
    );
    s.complete(&lease, &response(100)).await.unwrap();
    let stuck = unique_key("alice");
    let tiny = Duration::from_millis(50);
    s.insert_or_get(&request(&stuck, fp(1), tiny, DAY))
        .await
        .unwrap();
    // Another program's string key under the same prefix.
    let foreign = format!("{}not-a-record", s.key_prefix());
    let mut conn = common::raw(&common::url().unwrap()).await;
    let _: () = redis::cmd("SET")
        .arg(&foreign)
        .arg("x")
        .arg("EX")
        .arg(60)
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(tiny * 3).await;
    let g = s.gauges().await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&foreign)
        .query_async(&mut conn)
        .await
        .unwrap();
    if g.approximate {
        println!("skipping: the shared server holds over {SCAN_ALL_BELOW} keys just now");
        return;
    }
    assert_eq!((g.completed, g.in_progress, g.failed), (1, 1, 0));
    assert_eq!((g.stuck_in_progress, g.expired), (1, None));
    assert_eq!(g.body_bytes, Some(100));
    assert!(g.oldest_created_at.is_some_and(|c| c <= g.now));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_database_is_sampled() {
    let Some(s) = common::fresh_store().await else {
        return;
    };
    let url = common::url().unwrap();
    const MINE: u64 = 3000;
    completed(&s, MINE).await;
    let _filler = Filler::new(&url, SCAN_ALL_BELOW as usize + 5_000).await;
    let g = s.gauges().await.unwrap();
    assert!(g.approximate, "{g:?}");
    // 1000 random keys; ours are ~10% of the database: the estimate is far within half.
    assert!(
        g.completed > MINE / 2 && g.completed < MINE * 3 / 2,
        "estimate {} for {MINE}",
        g.completed
    );
    assert_eq!((g.in_progress, g.failed, g.expired), (0, 0, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_exactly_past_the_sampling_size() {
    let Some(s) = common::fresh_store().await else {
        return;
    };
    let url = common::url().unwrap();
    const MINE: u64 = 300;
    completed(&s, MINE).await;
    // Two records edited behind the store's back: one without a state, one with a state
    // no reader knows. Both are corrupt and counted as unknown, not skipped.
    let mut conn = common::raw(&url).await;
    let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(format!("{}*", s.key_prefix()))
        .arg("COUNT")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.len() >= 2, "{keys:?}");
    let _: () = redis::cmd("HDEL")
        .arg(&keys[0])
        .arg("st")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&keys[1])
        .arg("st")
        .arg("weird")
        .query_async(&mut conn)
        .await
        .unwrap();
    // A database of many other keys: the gauges sample it, `stats` still counts exactly.
    let _filler = Filler::new(&url, SCAN_ALL_BELOW as usize + 5_000).await;
    let exact = s.count_exact().await.unwrap();
    assert!(!exact.approximate, "{exact:?}");
    assert_eq!(
        (exact.completed, exact.unknown_state),
        (MINE - 2, 2),
        "{exact:?}"
    );
    assert_eq!(exact.records(), MINE);
    let sampled = s.gauges().await.unwrap();
    assert!(sampled.approximate, "{sampled:?}");
}
