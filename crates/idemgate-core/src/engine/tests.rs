use bytes::Bytes;

use super::*;
use crate::fingerprint::CURRENT_VERSION;
use crate::key::IdempotencyKey;
use crate::lifecycle::RoutePlan;
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
            sealed_by: None,
        }),
    }
}

/// (name, stored record, fingerprint, now, policy, expected decision).
type Row = (
    &'static str,
    Option<IdempotencyRecord>,
    u8,
    i64,
    RoutePlan,
    Decision,
);

/// Every row of the DESIGN.md contract table that the decision owns, and every transition.
#[test]
fn decision_table() {
    use Decision::*;
    use RecordState::*;
    let dflt = RoutePlan::default();
    let fail_policy = RoutePlan {
        lease_expired: LeaseExpiredPolicy::Fail,
        ..dflt
    };
    let takeover = RoutePlan {
        lease_expired: LeaseExpiredPolicy::Takeover,
        ..dflt
    };
    let retry_failed = RoutePlan {
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
        ("lease expired: outcome unknown (default)", Some(record(InProgress, Some(lease_end), false)), 1, lease_end, dflt, OutcomeUnknown),
        ("lease expired: policy takeover", Some(record(InProgress, Some(lease_end), false)), 1, lease_end, takeover, Takeover),
        ("lease expired: policy fail", Some(record(InProgress, Some(lease_end), false)), 1, lease_end, fail_policy, PreviousFailed),
        ("lease missing: in progress until created + max lease", Some(record(InProgress, None, false)), 1, max_lease_end - 1, dflt, InFlight { retry_after_ms: 1 }),
        ("lease missing, past max lease", Some(record(InProgress, None, false)), 1, max_lease_end, dflt, OutcomeUnknown),
        ("lease missing, past max lease: takeover", Some(record(InProgress, None, false)), 1, max_lease_end, takeover, Takeover),
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
