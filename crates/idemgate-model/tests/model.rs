//! The protocol model checked to completion at CI's bound, and each planted bug refuted.
//! `IDEMGATE_MODEL_BOUND=long cargo test --release -p idemgate-model -- --ignored` checks a
//! larger bound on purpose.

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

/// Found by this model, not yet settled against the code: where the route opts in to
/// take-overs, a take-over whose forward the upstream answers "nothing done" releases the
/// key, and a later request inserts it afresh and runs it unmarked, though the first holder
/// had run it. Kept as a counterexample until the lifecycle is checked (and the release
/// after a take-over kept the record, or failed it).
#[test]
fn a_takeover_released_as_nothing_done_lets_the_key_run_unmarked_again() {
    let m = Protocol {
        takeover: true,
        ..Protocol::ci()
    };
    refuted(m, names::AT_MOST_ONCE);
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
