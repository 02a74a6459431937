//! Damaged records: every store refuses the same damage, the same way.

use crate::integrity::RawRecord;
use crate::memory::MemoryStore;
use crate::record::{RecordState, ScopedKey};
use crate::store::{IdempotencyStore, StoreError};

use super::{fp, insert, request, response, unique_key, DAY, LONG};

/// A damage done to a completed record behind the store's back. Each store's test crate
/// implements them with raw writes (SQL `UPDATE`, Redis `HSET`/`HDEL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// The body loses its last bytes (the checksum no longer matches).
    TruncateBody,
    /// The status becomes `1000` (not an HTTP status).
    InvalidStatus,
    /// The status becomes `200` (a valid status, but not the one sealed by the checksum).
    AlteredStatus,
    /// The stored headers are removed (NULL column, missing hash field).
    DropHeaders,
    /// The stored body is removed (NULL column, missing hash field).
    DropBody,
    /// The first checksum byte is flipped.
    FlipChecksum,
    /// The state becomes `done`.
    UnknownState,
    /// The checksum is removed: a record written before checksums existed, which stays
    /// valid and replays.
    DropChecksum,
}

impl Damage {
    /// Every damage, in a fixed order.
    pub const ALL: [Damage; 8] = [
        Self::TruncateBody,
        Self::InvalidStatus,
        Self::AlteredStatus,
        Self::DropHeaders,
        Self::DropBody,
        Self::FlipChecksum,
        Self::UnknownState,
        Self::DropChecksum,
    ];

    /// Applies the damage to a raw record (the memory store's form).
    pub fn apply(self, raw: &mut RawRecord) {
        match self {
            Self::TruncateBody => {
                raw.body = raw
                    .body
                    .take()
                    .map(|b| b.slice(..b.len().saturating_sub(7)))
            }
            Self::InvalidStatus => raw.status = Some(1000),
            Self::AlteredStatus => raw.status = Some(200),
            Self::DropHeaders => raw.headers = None,
            Self::DropBody => raw.body = None,
            Self::FlipChecksum => {
                if let Some(c) = raw.checksum.as_mut().and_then(|c| c.first_mut()) {
                    *c ^= 1;
                }
            }
            Self::UnknownState => raw.state = Some("done".into()),
            Self::DropChecksum => raw.checksum = None,
        }
    }
}

/// The damage function for [`MemoryStore`].
pub async fn damage_memory(s: &MemoryStore, key: &ScopedKey, damage: Damage) {
    assert!(
        s.edit_raw(key, |raw| damage.apply(raw)),
        "no record to damage"
    );
}

/// A completed record with a 64-byte body, ready to be damaged.
pub async fn completed_record<S: IdempotencyStore>(s: &S) -> ScopedKey {
    let k = unique_key("alice");
    let lease = insert(s, &k, fp(1)).await;
    s.complete(&lease, &response(64)).await.unwrap();
    k
}

/// After `damage`, the record is refused by `get` and `insert_or_get` alike (never a
/// replay), and nothing overwrites it; a record without a checksum still replays.
pub async fn assert_damage_refused<S: IdempotencyStore>(s: &S, key: &ScopedKey, damage: Damage) {
    if damage == Damage::DropChecksum {
        let rec = s.get(key).await.unwrap().expect("record kept");
        assert_eq!(rec.state, RecordState::Completed);
        assert_eq!(rec.response, Some(response(64)), "{damage:?}");
        return;
    }
    let corrupt = |r: Result<_, StoreError>, what: &str| match r {
        Err(StoreError::Corrupt { detail }) => assert!(!detail.is_empty()),
        Err(e) => panic!("{damage:?}: {what} failed with {e:?}, not Corrupt"),
        Ok(_) => panic!("{damage:?}: {what} accepted a damaged record"),
    };
    corrupt(s.get(key).await.map(|_| ()), "get");
    match s.peek(key).await {
        Ok(crate::store::Peeked::NotRead) => {} // a store that does not read ahead
        r => corrupt(r.map(|_| ()), "peek"),
    }
    corrupt(
        s.insert_or_get(&request(key, fp(1), LONG, DAY))
            .await
            .map(|_| ()),
        "insert_or_get",
    );
    corrupt(s.get(key).await.map(|_| ()), "get after insert_or_get");
}
