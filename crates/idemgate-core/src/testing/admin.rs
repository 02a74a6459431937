//! The conformance cases of the operator operations ([`AdminStore`]).

use std::time::Duration;

use crate::admin::{AdminStore, KeyFilter};
use crate::gauges::GaugedStore;
use crate::record::{RecordState, ScopedKey};
use crate::store::IdempotencyStore;

use super::{
    fp, insert, inserted, request, response, unique_key, Damage, StoreCapabilities, DAY, LONG,
    TINY_LEASE,
};

fn filter(k: &ScopedKey, route: Option<&str>, principal: Option<&str>) -> KeyFilter {
    KeyFilter {
        key: k.key.clone(),
        route: route.map(str::to_owned),
        principal: principal.map(str::to_owned),
    }
}

/// The scopes listed for `f`, as (route, principal).
async fn scopes<S: AdminStore>(s: &S, f: &KeyFilter) -> Vec<(String, String)> {
    let listing = s.list_key(f).await.unwrap();
    listing
        .records
        .iter()
        .map(|r| (r.key.route.clone(), r.key.principal.clone()))
        .collect()
}

/// A key's records are listed in every scope, ordered by (route, principal), and narrowed
/// by route, principal or both; another key's records are never listed.
pub async fn admin_lists_every_scope_of_a_key<S: IdempotencyStore + AdminStore>(s: S) {
    let k = unique_key("bob");
    let other = unique_key("bob");
    let mut refunds = unique_key("alice");
    refunds.key = k.key.clone();
    refunds.route = "POST /refunds".into();
    let alice = ScopedKey {
        principal: "alice".into(),
        ..k.clone()
    };
    let lease = insert(&s, &k, fp(1)).await;
    insert(&s, &alice, fp(2)).await;
    insert(&s, &refunds, fp(3)).await;
    insert(&s, &other, fp(4)).await;
    let pay = |p: &str| ("POST /payments".to_owned(), p.to_owned());
    let all = scopes(&s, &filter(&k, None, None)).await;
    let refund = ("POST /refunds".to_owned(), "alice".to_owned());
    assert_eq!(all, vec![pay("alice"), pay("bob"), refund.clone()]);
    let by_alice = scopes(&s, &filter(&k, None, Some("alice"))).await;
    assert_eq!(by_alice, vec![pay("alice"), refund]);
    let by_route = scopes(&s, &filter(&k, Some("POST /payments"), None)).await;
    assert_eq!(by_route, vec![pay("alice"), pay("bob")]);
    let exact = s
        .list_key(&filter(&k, Some("POST /payments"), Some("bob")))
        .await
        .unwrap();
    let [raw] = exact.records.as_slice() else {
        panic!("one record expected: {:?}", exact.records);
    };
    assert_eq!(raw.key, k);
    assert_eq!(raw.state.as_deref(), Some("in_progress"));
    assert_eq!(
        (raw.fence, raw.lease_token, raw.lease_expires_at),
        (
            Some(lease.fence),
            Some(lease.token.0),
            Some(lease.expires_at)
        )
    );
    assert!(raw.created_at.is_some_and(|c| c <= exact.now));
    let none = filter(&k, Some("POST /nowhere"), None);
    assert!(s.list_key(&none).await.unwrap().records.is_empty());
}

/// `delete_exact` deletes the record it was shown, whatever its state, and nothing once the
/// record changed: a holder that renewed or completed it, or a new record under the key.
pub async fn admin_delete_is_exact<S: IdempotencyStore + AdminStore>(s: S) {
    let k = unique_key("alice");
    let f = filter(&k, Some(&k.route), Some(&k.principal));
    let lease = insert(&s, &k, fp(1)).await;
    let shown = s.list_key(&f).await.unwrap().records.remove(0);
    s.renew(&lease, LONG * 2).await.unwrap();
    assert!(
        !s.delete_exact(&shown).await.unwrap(),
        "a renewal changed it"
    );
    let renewed = s.list_key(&f).await.unwrap().records.remove(0);
    s.complete(&lease, &response(8)).await.unwrap();
    assert!(!s.delete_exact(&renewed).await.unwrap(), "completed since");
    assert!(s.get(&k).await.unwrap().is_some(), "nothing deleted");
    let completed = s.list_key(&f).await.unwrap().records.remove(0);
    assert_eq!(completed.state.as_deref(), Some("completed"));
    assert_eq!(completed.body.as_ref().map(|b| b.len()), Some(8));
    assert!(s.delete_exact(&completed).await.unwrap());
    assert!(s.get(&k).await.unwrap().is_none());
    assert!(s.list_key(&f).await.unwrap().records.is_empty());
    assert!(!s.delete_exact(&completed).await.unwrap(), "already gone");
    // a new record under the same key (created in a later millisecond) is not the one shown
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = insert(&s, &k, fp(1)).await;
    s.complete(&again, &response(8)).await.unwrap();
    assert!(!s.delete_exact(&completed).await.unwrap(), "a new record");
    assert!(s.get(&k).await.unwrap().is_some());
}

/// The damages [`assert_corrupt_listed_and_deleted`] is run after, each on a fresh
/// [`super::completed_record`].
pub const ADMIN_DAMAGES: [Damage; 2] = [Damage::UnknownState, Damage::TruncateBody];

/// After `d` damaged the record of `k`, it is still listed (raw) and deleted; the key is
/// then free.
pub async fn assert_corrupt_listed_and_deleted<S>(s: &S, k: &ScopedKey, d: Damage)
where
    S: IdempotencyStore + AdminStore,
{
    assert!(s.get(k).await.is_err(), "{d:?}: refused by get");
    let f = filter(k, Some(&k.route), Some(&k.principal));
    let mut listing = s.list_key(&f).await.unwrap();
    assert_eq!(listing.records.len(), 1, "{d:?}: listed");
    let raw = listing.records.remove(0);
    assert!(raw.clone().validate().is_err(), "{d:?}: listed as it is");
    assert!(s.delete_exact(&raw).await.unwrap(), "{d:?}: deleted");
    assert!(s.get(k).await.unwrap().is_none(), "{d:?}: gone");
    inserted(
        s.insert_or_get(&request(k, fp(1), LONG, DAY))
            .await
            .unwrap(),
    );
}

/// Stats (the exact count) count records by state, stuck `in_progress` ones (lapsed lease), body bytes, the
/// oldest record, and expired records not yet purged (none where the store expires them).
pub async fn admin_stats_count_by_state<S: GaugedStore>(s: S, caps: StoreCapabilities) {
    let empty = s.count_exact().await.unwrap();
    assert_eq!((empty.records(), empty.oldest_created_at), (0, None));
    assert!(!empty.approximate);
    insert(&s, &unique_key("live"), fp(1)).await;
    let done = insert(&s, &unique_key("done"), fp(1)).await;
    s.complete(&done, &response(64)).await.unwrap();
    let failed = insert(&s, &unique_key("failed"), fp(1)).await;
    s.fail(&failed).await.unwrap();
    let stuck = unique_key("stuck");
    inserted(
        s.insert_or_get(&request(&stuck, fp(1), TINY_LEASE, DAY))
            .await
            .unwrap(),
    );
    let ttl = Duration::from_millis(300);
    let gone = unique_key("gone");
    inserted(
        s.insert_or_get(&request(&gone, fp(1), TINY_LEASE, ttl))
            .await
            .unwrap(),
    );
    tokio::time::sleep(ttl + Duration::from_millis(150)).await;
    let st = s.count_exact().await.unwrap();
    let expired = u64::from(!caps.native_expiry);
    assert_eq!(
        (st.completed, st.failed, st.unknown_state, st.body_bytes),
        (1, 1, 0, Some(64))
    );
    assert_eq!(
        (st.records(), st.in_progress, st.expired.unwrap_or(0)),
        (4 + expired, 2 + expired, expired)
    );
    assert_eq!(st.stuck_in_progress, 1, "the expired one is not stuck");
    assert!(st.oldest_created_at.is_some_and(|o| o <= st.now));
    let rec = s.get(&stuck).await.unwrap().expect("stuck record");
    assert_eq!(rec.state, RecordState::InProgress);
    sealed_counted_per_key_id(&s).await;
}

/// [`GaugedStore::count_sealed`]: records sealed under each key id, none in clear.
async fn sealed_counted_per_key_id<S: GaugedStore>(s: &S) {
    let Some(before) = s.count_sealed().await.unwrap() else {
        return; // a store that cannot count them says so
    };
    assert!(before.is_empty(), "{before:?}");
    let ring = |seed: u8| crate::seal::Keyring::new(vec![[seed; 32]]).unwrap();
    let (a, b) = (ring(0x11), ring(0x22));
    for (n, ring) in [(2, &a), (1, &b)] {
        for _ in 0..n {
            let k = unique_key("sealed");
            let lease = insert(s, &k, fp(1)).await;
            s.complete(&lease, &ring.seal(&k, lease.fence, &response(8)))
                .await
                .unwrap();
        }
    }
    let mut want = vec![
        (a.sealing_id().to_string(), 2),
        (b.sealing_id().to_string(), 1),
    ];
    want.sort();
    assert_eq!(s.count_sealed().await.unwrap(), Some(want));
}
