use idemgate_core::testing::{fp, response, unique_key};
use idemgate_core::{Lease, LeaseToken, RecordState};

use super::{Entry, JournalFile};

fn entry(lease: &Lease) -> Entry {
    Entry {
        key: lease.key.clone(),
        fence: lease.fence,
        token: lease.token,
        fingerprint: fp(1),
        state: RecordState::InProgress,
        response: None,
        lease_ttl_ms: 30_000,
        expires_at_ms: i64::MAX,
        run: 1,
    }
}

/// Found by the simulation (seed 242530): a release retried after its answer was lost
/// found the lease gone, and its journal removal, by key and fence alone, deleted the entry
/// of the key's next acquire at the same fence; a failover then lost that acquire's run,
/// and nothing restored it.
#[test]
fn a_stale_lease_s_release_or_outcome_leaves_the_next_acquire_s_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut file = JournalFile::open(&dir.path().join("j.db")).expect("open");
    let key = unique_key("alice");
    let lease = |token| Lease {
        key: key.clone(),
        fence: 1,
        token: LeaseToken(token),
        expires_at: 0,
    };
    let (first, next) = (lease(1), lease(2));
    file.put(&entry(&first), 0).expect("put");
    file.put(&entry(&next), 0).expect("the key acquired again");

    file.remove(&first).expect("remove");
    assert!(!file.outcome(&first, Some(&response(1))).expect("outcome"));
    let entries = file.entries().expect("entries");
    assert_eq!(
        entries,
        vec![entry(&next)],
        "the next acquire's entry is kept"
    );

    assert!(file.outcome(&next, Some(&response(2))).expect("outcome"));
    let kept = &file.entries().expect("entries")[0];
    assert_eq!(kept.state, RecordState::Completed);
    assert_eq!(kept.response, Some(response(2)));
    file.remove(&next).expect("remove");
    assert!(file.entries().expect("entries").is_empty());
}
