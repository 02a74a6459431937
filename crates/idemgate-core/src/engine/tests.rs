use bytes::Bytes;

use super::*;
use crate::fingerprint::CURRENT_VERSION;
use crate::key::IdempotencyKey;
use crate::record::{LeaseToken, ScopedKey, StoredResponse};

fn fp(n: u8) -> Fingerprint {
    Fingerprint {
        version: CURRENT_VERSION,
        digest: [n; 32],
    }
}

fn key() -> ScopedKey {
    ScopedKey {
        principal: "p".into(),
        route: "POST /payments".into(),
        key: IdempotencyKey::new("abcdefgh").unwrap(),
    }
}

const T0: i64 = 1_000_000;

fn record(state: RecordState, lease: Option<i64>, replayable: bool) -> IdempotencyRecord {
    IdempotencyRecord {
        key: key(),
        fingerprint: fp(1),
        state,
        fence: 3,
        lease_token: lease.map(|_| LeaseToken(9)),
        lease_expires_at: lease,
        created_at: T0,
        completed_at: None,
        expires_at: T0 + 86_400_000,
        response: (state == RecordState::Completed).then(|| StoredResponse {
            status: 201,
            headers: vec![],
            body: Bytes::from_static(b"{}"),
            replayable,
        }),
    }
}

/// (name, stored record, fingerprint, now, policy, expected decision).
type Row = (
    &'static str,
    Option<IdempotencyRecord>,
    u8,
    i64,
    DecisionPolicy,
    Decision,
);

/// Every row of the DESIGN.md contract table that the decision owns, and every transition.
#[test]
fn decision_table() {
    use Decision::*;
    use RecordState::*;
    let dflt = DecisionPolicy::default();
    let fail_policy = DecisionPolicy {
        lease_expired: LeaseExpiredPolicy::Fail,
        ..dflt
    };
    let retry_failed = DecisionPolicy {
        retry_failed: true,
        ..dflt
    };
    let lease_end = T0 + 10_000;
    let ttl_end = T0 + 86_400_000;
    let max_lease_end = T0 + dflt.max_lease.as_millis() as i64;
    #[rustfmt::skip]
    let rows: Vec<Row> = vec![
        ("first request", None, 1, T0, dflt, Insert),
        ("in flight, lease valid", Some(record(InProgress, Some(lease_end), false)), 1, T0 + 1, dflt, InFlight { retry_after_ms: 1000 }),
        ("in flight, lease about to lapse", Some(record(InProgress, Some(lease_end), false)), 1, lease_end - 300, dflt, InFlight { retry_after_ms: 300 }),
        ("lease expired: takeover", Some(record(InProgress, Some(lease_end), false)), 1, lease_end, dflt, Takeover),
        ("lease expired: policy fail", Some(record(InProgress, Some(lease_end), false)), 1, lease_end, fail_policy, PreviousFailed),
        ("lease missing: in progress until created + max lease", Some(record(InProgress, None, false)), 1, max_lease_end - 1, dflt, InFlight { retry_after_ms: 1 }),
        ("lease missing, past max lease", Some(record(InProgress, None, false)), 1, max_lease_end, dflt, Takeover),
        ("completed: replay", Some(record(Completed, None, true)), 1, T0 + 5, dflt, Replay),
        ("completed, not kept", Some(record(Completed, None, false)), 1, T0 + 5, dflt, NotReplayable),
        ("failed", Some(record(Failed, None, false)), 1, T0 + 5, dflt, PreviousFailed),
        ("failed, retry allowed", Some(record(Failed, None, false)), 1, T0 + 5, retry_failed, Takeover),
        ("mismatch while in flight", Some(record(InProgress, Some(lease_end), false)), 2, T0 + 1, dflt, Mismatch),
        ("mismatch with expired lease (no takeover)", Some(record(InProgress, Some(lease_end), false)), 2, lease_end + 1, dflt, Mismatch),
        ("mismatch on completed", Some(record(Completed, None, true)), 2, T0 + 1, dflt, Mismatch),
        ("mismatch on failed, even with retry", Some(record(Failed, None, false)), 2, T0 + 1, retry_failed, Mismatch),
        ("ttl expired: new", Some(record(Completed, None, true)), 1, ttl_end, dflt, Insert),
        ("ttl expired, other fingerprint: new", Some(record(Completed, None, true)), 2, ttl_end, dflt, Insert),
        ("ttl expired while in flight: new", Some(record(InProgress, Some(ttl_end + 5), false)), 1, ttl_end, dflt, Insert),
    ];
    for (name, rec, f, now, policy, want) in rows {
        assert_eq!(decide(rec.as_ref(), &fp(f), now, &policy), want, "{name}");
    }
}

fn req(f: u8) -> AcquireRequest {
    AcquireRequest {
        key: key(),
        fingerprint: fp(f),
        token: LeaseToken(42),
        lease_ttl: Duration::from_secs(10),
        record_ttl: Duration::from_secs(86_400),
        policy: DecisionPolicy::default(),
    }
}

#[test]
fn acquire_inserts_takes_over_or_returns_existing() {
    // (none) → in_progress, fence 1
    let (row, out) = apply_acquire(None, &req(1), T0);
    let row = row.unwrap();
    assert_eq!(
        (row.state, row.fence, row.lease_expires_at),
        (RecordState::InProgress, 1, Some(T0 + 10_000))
    );
    assert_eq!(row.expires_at, T0 + 86_400_000);
    assert!(
        matches!(out, AcquireOutcome::Acquired { takeover: false, ref lease } if lease.fence == 1 && lease.token == LeaseToken(42))
    );

    // expired lease → takeover, fence + 1, created_at and expires_at kept
    let stale = record(RecordState::InProgress, Some(T0 + 10), false);
    let (row, out) = apply_acquire(Some(stale.clone()), &req(1), T0 + 20);
    let row = row.unwrap();
    assert_eq!(
        (row.fence, row.created_at, row.expires_at),
        (4, T0, stale.expires_at)
    );
    assert!(matches!(
        out,
        AcquireOutcome::Acquired { takeover: true, .. }
    ));

    // live lease → existing, nothing written
    let (row, out) = apply_acquire(Some(stale.clone()), &req(1), T0 + 5);
    assert!(row.is_none());
    assert!(matches!(out, AcquireOutcome::Existing { now, .. } if now == T0 + 5));

    // mismatch → existing, record untouched
    let (row, _) = apply_acquire(Some(stale.clone()), &req(2), T0 + 20);
    assert!(row.is_none());

    // TTL expired → new record, fence keeps growing
    let old = record(RecordState::Completed, None, true);
    let (row, out) = apply_acquire(Some(old.clone()), &req(2), old.expires_at);
    let row = row.unwrap();
    assert_eq!(
        (row.fence, row.created_at, row.fingerprint),
        (4, old.expires_at, fp(2))
    );
    assert!(row.response.is_none());
    assert!(matches!(
        out,
        AcquireOutcome::Acquired {
            takeover: false,
            ..
        }
    ));
}
