//! The protocol model checked to completion at CI's bound, and each planted bug refuted.
//! `cargo test --release --manifest-path crates/idemgate-model/Cargo.toml --target-dir target/model -- --ignored`
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
/// (`Idempotent-Takeover`), never a second unmarked one; no stale write lands; and a
/// failover never changes the outcome replayed. Store answers are not lost here (the bound
/// with them runs past CI's minutes).
#[test]
fn with_take_overs_every_rerun_is_marked_and_replays_hold() {
    let m = Protocol {
        takeover: true,
        lost_answers: false,
        ..Protocol::ci()
    };
    holds_only(m, &SAFETY);
}

/// Where duplicates wait for the outcome (`on_in_flight = "wait"`): a waiter answers with
/// the stored outcome, `outcome-unknown` or `409`, or acquires a key its holder released,
/// and no key runs twice. Without crashes and lost store answers (a holder's lease still
/// lapses by the clock), so it fits CI's minutes.
#[test]
fn with_waiters_the_protocol_holds() {
    let m = Protocol {
        waits: true,
        lost_answers: false,
        max_crashes: 0,
        ..Protocol::ci()
    };
    let reached = [
        names::A_WAITER_REPLAY,
        names::A_WAITER_ACQUIRES,
        names::A_RESTORE,
    ];
    holds(m, &reached);
}

/// An operator's `release --force` and `resolve`, each under the runbook's premise (it did
/// not run and cannot be running; it ran, with its answer), against holders that are late,
/// crash or fail over: no key runs twice and every replay is the answer stored first.
#[test]
fn with_an_operator_the_protocol_holds() {
    let m = Protocol {
        operator: true,
        lost_answers: false,
        ..Protocol::ci()
    };
    holds(m, &[names::AN_OPERATOR_ACTS, names::A_REPLAY]);
}

/// The CI bound with `bugs` planted, with or without take-overs.
fn planted(bugs: Bugs, takeover: bool) -> Protocol {
    Protocol {
        bugs,
        takeover,
        ..Protocol::ci()
    }
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
    refuted(planted(bugs, true), names::AT_MOST_ONCE);
}

/// Found by this model, and fixed in the journal's restore: the take-over's outcome is lost
/// with the primary's suffix, the holder taken over from gets its live lease back from its
/// journal and its outcome lands, and the restore of the take-over's entry did not write
/// over a completed record: replays answered the first holder's response, though the
/// take-over's was stored (and answered) first.
#[test]
fn planted_restore_that_keeps_a_completed_record_is_refuted() {
    let bugs = Bugs {
        restore_keeps_completed: true,
        ..Bugs::default()
    };
    let m = Protocol {
        lost_answers: false,
        ..planted(bugs, true)
    };
    refuted(m, names::REPLAYS_EQUAL);
}

/// The other half of that fix: until every journal has restored, an outcome that landed
/// after the failover is not replayed (`ReplayHeld`); a restore may still write over it.
#[test]
fn planted_replay_of_an_outcome_landed_in_the_gate_is_refuted() {
    let bugs = Bugs {
        replays_not_held: true,
        ..Bugs::default()
    };
    let m = Protocol {
        lost_answers: false,
        ..planted(bugs, true)
    };
    refuted(m, names::REPLAYS_EQUAL);
}

/// The longer bound, on purpose: `cargo test --release --manifest-path
/// crates/idemgate-model/Cargo.toml --target-dir target/model -- --ignored` (about 11 minutes on 2 cores).
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
    refuted(planted(bugs, true), names::NO_STALE_WRITE);
}

#[test]
fn planted_takeover_by_default_is_refuted() {
    let bugs = Bugs {
        takeover_by_default: true,
        ..Bugs::default()
    };
    refuted(planted(bugs, false), names::AT_MOST_ONCE);
}

#[test]
fn planted_journal_ignored_after_failover_is_refuted() {
    let bugs = Bugs {
        journal_ignored: true,
        ..Bugs::default()
    };
    refuted(planted(bugs, false), names::AT_MOST_ONCE);
}
