//! The protocol model checked to completion at CI's bound, and each planted bug refuted.
//! `cargo test --release --manifest-path crates/idemgate-model/Cargo.toml -- --ignored`
//! checks a longer bound on purpose.

use std::collections::BTreeSet;

use idemgate_model::{names, Bugs, Protocol};
use stateright::{Checker, HasDiscoveries, Model};

/// Checks `m` until a property in `stop` is discovered, or to completion.
fn check(m: Protocol, stop: HasDiscoveries) -> impl Checker<Protocol> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let checker = m
        .checker()
        .threads(threads)
        .finish_when(stop)
        .spawn_bfs()
        .join();
    eprintln!(
        "{} states ({} unique), depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    checker
}

const SAFETY: [&str; 3] = [
    names::AT_MOST_ONCE,
    names::REPLAYS_EQUAL,
    names::NO_STALE_WRITE,
];

/// Checks `m` to completion: no safety property fails, and each of `reached` is reached.
fn holds(m: Protocol, reached: &[&'static str]) {
    let checker = check(m, HasDiscoveries::AnyFailures);
    for p in SAFETY {
        checker.assert_no_discovery(p);
    }
    for p in reached {
        checker.assert_any_discovery(p);
    }
}

/// Checks `m` to completion for `properties` alone: none fails.
fn holds_only(m: Protocol, properties: &[&'static str]) {
    let stop = HasDiscoveries::AnyOf(properties.iter().copied().collect());
    let checker = check(m, stop);
    for p in properties {
        checker.assert_no_discovery(p);
    }
}

/// Checks `m` until `property` fails, and prints the counterexample.
fn refuted(m: Protocol, property: &'static str) {
    let checker = check(m, HasDiscoveries::AnyOf(BTreeSet::from([property])));
    let path = checker.assert_any_discovery(property);
    eprintln!("{property}: {:?}", path.into_actions());
}

#[test]
fn the_protocol_keeps_at_most_once_at_the_ci_bound() {
    let reached = [
        names::A_REPLAY,
        names::AN_UNKNOWN,
        names::A_RESTORE,
        names::FAILOVER_MID_FLIGHT,
    ];
    holds(Protocol::ci(), &reached);
}

/// Where the route opts in to take-overs: reruns happen, each marked by the attempt header
/// (`Idempotent-Takeover`), never a second unmarked one, and no stale write lands. Store
/// answers are not lost here (the bound with them runs past CI's minutes).
#[test]
fn with_take_overs_every_rerun_is_marked() {
    let m = Protocol {
        takeover: true,
        lost_answers: false,
        ..Protocol::ci()
    };
    holds_only(m, &[names::AT_MOST_ONCE, names::NO_STALE_WRITE]);
}

/// Found by this model, open: with take-overs and a failover, the take-over's outcome is
/// lost with the primary's suffix, the holder taken over from gets its live lease back from
/// its journal and its outcome lands, and the restore of the take-over's entry does not
/// overwrite a completed record: replays answer the first holder's response, though the
/// take-over's was stored (and answered) first. No operation runs twice (see above).
#[test]
fn with_take_overs_a_failover_can_change_the_stored_outcome() {
    let m = Protocol {
        takeover: true,
        ..Protocol::ci()
    };
    refuted(m, names::REPLAYS_EQUAL);
}

/// Found by this model, and fixed (`Finished::LeftToLapse`): a take-over whose forward the
/// upstream answered "nothing done" released the key, and a later request inserted it
/// afresh and ran it unmarked, though the holder taken over from had run it.
#[test]
fn planted_release_after_a_take_over_is_refuted() {
    let bugs = Bugs {
        takeover_release_deletes: true,
        ..Bugs::default()
    };
    let m = Protocol {
        bugs,
        takeover: true,
        ..Protocol::ci()
    };
    refuted(m, names::AT_MOST_ONCE);
}

/// The longer bound, on purpose: `cargo test --release --manifest-path
/// crates/idemgate-model/Cargo.toml -- --ignored` (about 11 minutes on 2 cores).
#[test]
#[ignore = "minutes: run on purpose"]
fn the_protocol_keeps_at_most_once_at_the_long_bound() {
    holds(Protocol::long(), &[names::A_REPLAY, names::AN_UNKNOWN]);
}

#[test]
fn without_the_journal_a_failover_runs_a_key_twice() {
    // The documented limit of an asynchronous standby without `forward_journal_file`.
    let m = Protocol {
        journal: false,
        ..Protocol::ci()
    };
    refuted(m, names::AT_MOST_ONCE);
}

#[test]
fn planted_renew_without_its_fence_is_refuted() {
    let bugs = Bugs {
        renew_unfenced: true,
        ..Bugs::default()
    };
    let m = Protocol {
        bugs,
        takeover: true,
        ..Protocol::ci()
    };
    refuted(m, names::NO_STALE_WRITE);
}

#[test]
fn planted_takeover_by_default_is_refuted() {
    let bugs = Bugs {
        takeover_by_default: true,
        ..Bugs::default()
    };
    refuted(
        Protocol {
            bugs,
            ..Protocol::ci()
        },
        names::AT_MOST_ONCE,
    );
}

#[test]
fn planted_journal_ignored_after_failover_is_refuted() {
    let bugs = Bugs {
        journal_ignored: true,
        ..Bugs::default()
    };
    refuted(
        Protocol {
            bugs,
            ..Protocol::ci()
        },
        names::AT_MOST_ONCE,
    );
}
