//! The simulation in CI: 1,000 seeds clean (half of them through the gateway's proxy),
//! runs that repeat exactly, and each planted bug found within 1,000 seeds.

use std::collections::BTreeMap;

use idemgate_sim::{run, run_on, Path, Planted};

/// The connection faults of the proxy path, each injected within the first 1,000 seeds.
const CONNECTION_FAULTS: [&str; 4] = [
    "upstream refuses the connection",
    "upstream closes the connection after running",
    "upstream response head cut",
    "upstream response body cut",
];

#[test]
fn a_thousand_seeds_hold_every_check() {
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let mut failing = Vec::new();
    for report in (0..1_000).map(|seed| run(seed, None)) {
        for (kind, n) in &report.faults {
            *faults.entry(kind).or_default() += n;
        }
        if !report.violations.is_empty() {
            let why = report.violations.join("; ");
            failing.push(format!("{}  # {why}", report.replay_command()));
        }
    }
    assert!(failing.is_empty(), "failing seeds:\n{}", failing.join("\n"));
    for kind in CONNECTION_FAULTS {
        assert!(
            faults.get(kind).is_some_and(|&n| n > 0),
            "{kind} never injected"
        );
    }
}

/// Seeds 1, 87 and 4069 run through the proxy (odd seeds); 2 as a tower service.
#[test]
fn a_seed_runs_the_same_every_time() {
    assert_eq!((Path::of(1), Path::of(2)), (Path::Proxy, Path::Tower));
    for seed in [1, 2, 87, 4069] {
        let (a, b) = (run(seed, None), run(seed, None));
        assert_eq!((a.digest, a.events), (b.digest, b.events), "seed {seed}");
    }
}

fn first_failing(planted: Planted) -> Option<u64> {
    (0..1_000).find(|&seed| !run(seed, Some(planted)).violations.is_empty())
}

#[test]
fn every_planted_bug_is_found_within_a_thousand_seeds() {
    for planted in Planted::ALL {
        let seed = first_failing(planted);
        let seed = seed.unwrap_or_else(|| panic!("{} not found", planted.name()));
        let report = run(seed, Some(planted));
        println!(
            "{}  # {}",
            report.replay_command(),
            report.violations.join("; ")
        );
    }
}

/// Modelling errors the simulation's journal model had, pinned by the seeds that found them
/// (docs/simulation.md, "What it found"): 410070 journaled an insert whose answer was lost;
/// 968097 counted an outcome restored while replays were held as the one replays must equal.
/// Found before the proxy path: they run on the tower path, as they did.
#[test]
fn seeds_that_found_journal_model_gaps_hold() {
    for seed in [60, 246, 1364, 1467, 4069, 10771, 19779, 410070, 968097] {
        let report = run_on(seed, None, Path::Tower);
        assert!(report.violations.is_empty(), "{}", report.replay_command());
    }
}

/// A real bug, in the forward journal (`JournalFile::remove`, fixed with its own test
/// there): a release retried after its answer was lost found the lease gone, and the
/// journal dropped the entry of the key's next acquire at the same fence by key and fence
/// alone; a failover then lost that acquire, nothing restored it, and the key ran again
/// (on `/pay`: 242530, 779600, 889423; on `/to`, unmarked: 108116, 236818). Among them,
/// seeds that left a key stuck `in_progress` by the same cause (210164, 311339). Run on
/// the tower path, as found.
#[test]
fn seeds_that_found_the_journal_s_stale_release_hold() {
    for seed in [242530, 779600, 889423, 108116, 236818, 210164, 311339] {
        let report = run_on(seed, None, Path::Tower);
        assert!(report.violations.is_empty(), "{}", report.replay_command());
    }
}
