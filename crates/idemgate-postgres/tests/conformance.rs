//! The store conformance suite against [`PostgresStore`], gated on
//! `IDEMGATE_TEST_DATABASE_URL`.
//!
//! Every case gets a table of its own (`idem_test_<unix secs>_<random>`), as each memory-store
//! case gets a fresh store: the purge cases count every expired row of their table. The
//! table is dropped when the case's store is ([`common::TestStore`]).

use idemgate_core::testing::Damage;
use idemgate_core::ScopedKey;

mod common;

use common::TestStore;

async fn make() -> Option<TestStore> {
    common::fresh_store().await
}

/// Damages the completed record under `key` with a raw `UPDATE`, as [`Damage::apply`] does
/// to a memory record. A damage a CHECK constraint forbids (an unknown state) first drops
/// the constraint, as a careless operator could: the store must still refuse the record.
async fn damage(store: &TestStore, key: &ScopedKey, damage: Damage) {
    let table = store.table_name();
    let set = match damage {
        Damage::TruncateBody => "response = substring(response from 1 for length(response) - 7)",
        Damage::InvalidStatus => "status = 1000",
        Damage::AlteredStatus => "status = 200",
        Damage::DropHeaders => "response_headers = NULL",
        Damage::DropBody => "response = NULL",
        Damage::FlipChecksum => {
            "response_checksum = set_byte(response_checksum, 0, get_byte(response_checksum, 0) # 1)"
        }
        Damage::UnknownState => "state = 'done'",
        Damage::DropChecksum => "response_checksum = NULL",
    };
    if damage == Damage::UnknownState {
        let drop =
            format!("ALTER TABLE \"{table}\" DROP CONSTRAINT IF EXISTS \"{table}_state_check\"");
        sqlx::raw_sql(&drop).execute(store.pool()).await.unwrap();
    }
    let done = sqlx::query(&format!(
        "UPDATE \"{table}\" SET {set} WHERE user_id = $1 AND route = $2 AND key = $3 \
         AND state = 'completed' AND response_checksum IS NOT NULL"
    ))
    .bind(&key.principal)
    .bind(&key.route)
    .bind(key.key.as_str())
    .execute(store.pool())
    .await
    .unwrap();
    assert_eq!(
        done.rows_affected(),
        1,
        "{damage:?}: no completed record to damage"
    );
}

idemgate_core::store_conformance!(make, damage);
idemgate_core::admin_conformance!(make, damage);
