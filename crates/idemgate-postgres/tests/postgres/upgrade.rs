//! Rolling upgrade: a table migrated and written by the previous build (migration 0001
//! only, its SQL) keeps working for both builds once migration 0002 is applied.

use std::time::Duration;

use idemgate_core::testing::{fp, inserted, request, response, unique_key};
use idemgate_core::{IdempotencyStore, LeaseToken, RecordState, ScopedKey, StoredResponse};
use idemgate_postgres::PostgresStore;

use crate::{common, DAY};

/// Migration 0001 as shipped: it must never change (databases recorded its MD5).
const MIGRATION_0001: &str = include_str!("../../migrations/0001_idempotency_records.sql");
const MIGRATION_0001_MD5: &str = "3abc3537f4dfcf1fcebe7a0a1eec3cff";

/// The previous build's statements (before checksums), as fixtures.
struct OldGateway<'a> {
    store: &'a PostgresStore,
}

impl OldGateway<'_> {
    /// The previous build's `migrate`: migration 0001 only, recorded as version 1.
    async fn migrate(&self) {
        let name = self.store.table_name();
        let sql = MIGRATION_0001
            .replace("{table}", &format!("\"{name}\""))
            .replace("{name}", &name);
        sqlx::raw_sql(&format!(
            "{sql}; CREATE TABLE \"{name}_migrations\" (version BIGINT PRIMARY KEY, \
             description TEXT NOT NULL, checksum TEXT NOT NULL, \
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        ))
        .execute(self.store.pool())
        .await
        .unwrap();
        sqlx::query(&format!(
            "INSERT INTO \"{name}_migrations\" (version, description, checksum) \
             VALUES (1, 'idempotency_records', md5($1))"
        ))
        .bind(MIGRATION_0001)
        .execute(self.store.pool())
        .await
        .unwrap();
    }

    /// The previous build's `UPDATE` with the key bound as `$1..$3`, then `binds`.
    async fn update(&self, set: &str, filter: &str, k: &ScopedKey, binds: &[i64]) -> u64 {
        let sql = format!(
            "UPDATE \"{}\" SET {set} WHERE user_id = $1 AND route = $2 AND key = $3 AND {filter}",
            self.store.table_name()
        );
        let mut query = sqlx::query(&sql)
            .bind(&k.principal)
            .bind(&k.route)
            .bind(k.key.as_str());
        for b in binds {
            query = query.bind(*b);
        }
        query
            .execute(self.store.pool())
            .await
            .unwrap()
            .rows_affected()
    }

    /// The previous build's insert of a fresh key (fence 1).
    async fn insert(&self, k: &ScopedKey, token: i64) {
        sqlx::query(&format!(
            "INSERT INTO \"{}\" (user_id, route, key, request_hash, fingerprint_version, \
             state, fence, lease_token, lease_expires_at, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, 1, 'in_progress', 1, $5, now() + interval '1 minute', \
             now(), now() + interval '1 day')",
            self.store.table_name()
        ))
        .bind(&k.principal)
        .bind(&k.route)
        .bind(k.key.as_str())
        .bind(fp(1).digest.as_slice())
        .bind(token)
        .execute(self.store.pool())
        .await
        .unwrap();
    }

    /// The previous build's replacement of an expired record: fence + 1, response cleared,
    /// but it knows nothing of the checksum columns.
    async fn replace_expired(&self, k: &ScopedKey, fence: i64, token: i64) {
        let set = "state = 'in_progress', fence = fence + 1, lease_token = $5, \
             lease_expires_at = now() + interval '1 minute', created_at = now(), \
             completed_at = NULL, expires_at = now() + interval '1 day', status = NULL, \
             response_headers = NULL, response = NULL, replayable = NULL";
        let filter = "fence = $4 AND expires_at <= now()";
        assert_eq!(self.update(set, filter, k, &[fence, token]).await, 1);
    }

    /// The previous build's complete: no checksum.
    async fn complete(&self, k: &ScopedKey, fence: i64, token: i64, r: &StoredResponse) {
        let sql = format!(
            "UPDATE \"{}\" SET state = 'completed', status = $6, response_headers = $7, \
             response = $8, replayable = $9, completed_at = now(), lease_token = NULL, \
             lease_expires_at = NULL WHERE user_id = $1 AND route = $2 AND key = $3 \
             AND state = 'in_progress' AND fence = $4 AND lease_token = $5",
            self.store.table_name()
        );
        let done = sqlx::query(&sql)
            .bind(&k.principal)
            .bind(&k.route)
            .bind(k.key.as_str())
            .bind(fence)
            .bind(token)
            .bind(i32::from(r.status))
            .bind(r.encode_headers())
            .bind(r.body.as_ref())
            .bind(r.replayable)
            .execute(self.store.pool())
            .await
            .unwrap();
        assert_eq!(done.rows_affected(), 1);
    }
}

#[tokio::test]
async fn migration_0001_is_unchanged() {
    let Some(url) = common::url() else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    let md5: String = sqlx::query_scalar("SELECT md5($1)")
        .bind(MIGRATION_0001)
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(
        md5, MIGRATION_0001_MD5,
        "an applied migration was edited: add a new one"
    );
}

/// A store on a table of its own, created and recorded by the previous build's migrate.
async fn old_table() -> Option<common::TestStore> {
    let store = PostgresStore::connect(&common::url()?).await.unwrap();
    let store = common::TestStore::adopt(store.with_table_name(&common::table_name()).unwrap())?;
    OldGateway { store: &store }.migrate().await;
    Some(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_gateways_share_a_table() {
    let Some(store) = old_table().await else {
        return;
    };
    let old = OldGateway { store: &store };
    let before = unique_key("alice");
    old.insert(&before, 7).await;
    old.complete(&before, 1, 7, &response(10)).await;

    store.migrate().await.unwrap();
    let versions: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT version FROM \"{}_migrations\" ORDER BY version",
        store.table_name()
    ))
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(versions, [1, 2, 3, 4, 5]);
    // A record the old build completed replays (no checksum); the old build still writes.
    let rec = store.get(&before).await.unwrap().unwrap();
    assert_eq!(rec.response, Some(response(10)));
    let during = unique_key("alice");
    old.insert(&during, 8).await;
    old.complete(&during, 1, 8, &response(0)).await;
    let rec = store.get(&during).await.unwrap().unwrap();
    assert_eq!(rec.response, Some(response(0)));

    // The new build completes and takes over rows the old build wrote.
    let failed = unique_key("alice");
    old.insert(&failed, 11).await;
    let set = "state = 'failed', lease_token = NULL, lease_expires_at = NULL";
    assert_eq!(old.update(set, "fence = 1", &failed, &[]).await, 1);
    let seen = store.get(&failed).await.unwrap().unwrap();
    let again = store
        .take_over(&seen, LeaseToken::random(), DAY)
        .await
        .unwrap();
    let again = again.expect("taken over");
    assert_eq!(again.fence, 2);
    store.complete(&again, &response(1)).await.unwrap();
    let rec = store.get(&failed).await.unwrap().unwrap();
    assert_eq!(rec.response, Some(response(1)));
}

/// The new build seals a response; it expires; the old build re-inserts the key (fence + 1)
/// and completes it without knowing the checksum. The stale checksum belongs to the old
/// fence and is ignored: the old build's response replays, it is not read as damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_left_behind_by_the_old_build_is_ignored() {
    let Some(store) = old_table().await else {
        return;
    };
    store.migrate().await.unwrap();
    let old = OldGateway { store: &store };
    let k = unique_key("alice");
    let ttl = Duration::from_millis(200);
    let req = request(&k, fp(1), ttl / 2, ttl);
    let lease = inserted(store.insert_or_get(&req).await.unwrap());
    store.complete(&lease, &response(4)).await.unwrap();
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    old.replace_expired(&k, lease.fence, 9).await;
    old.complete(&k, lease.fence + 1, 9, &response(20)).await;
    let rec = store.get(&k).await.unwrap().unwrap();
    assert_eq!(
        (rec.state, rec.fence),
        (RecordState::Completed, lease.fence + 1)
    );
    assert_eq!(rec.response, Some(response(20)));
}
