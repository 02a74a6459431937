//! `simulate SEEDS [--from N] [--planted BUG] [--path tower|proxy]` runs seeds
//! `N..N+SEEDS` and prints a progress line and seeds per second; `simulate --seed N
//! [--planted BUG] [--path P]` replays one. Without `--path`, each seed runs on its own
//! (odd seeds through the gateway's proxy).
//! A failing seed prints the one-line command that replays it; the exit status is 1.

// Seeds per second is wall time, outside the simulated clock.
#[allow(clippy::disallowed_types)]
use std::time::Instant;

use idemgate_sim::{run_on, Path, Planted};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    let planted = value("--planted").map(|n| {
        Planted::parse(n).unwrap_or_else(|| {
            let names: Vec<_> = Planted::ALL.iter().map(|p| p.name()).collect();
            eprintln!("unknown planted bug {n}; one of {names:?}");
            std::process::exit(2)
        })
    });
    let path = value("--path").map(|n| {
        Path::parse(n).unwrap_or_else(|| {
            eprintln!("unknown path {n}; tower or proxy");
            std::process::exit(2)
        })
    });
    if let Some(seed) = value("--seed") {
        let seed = seed.parse().expect("--seed takes a number");
        let report = run_on(seed, planted, path.unwrap_or(Path::of(seed)));
        println!("{report:#?}");
        std::process::exit(i32::from(!report.violations.is_empty()));
    }
    let seeds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(1_000);
    let from: u64 = value("--from").and_then(|s| s.parse().ok()).unwrap_or(0);
    std::process::exit(many(from, seeds, planted, path));
}

fn many(from: u64, seeds: u64, planted: Option<Planted>, path: Option<Path>) -> i32 {
    #[allow(clippy::disallowed_types)]
    let started = Instant::now();
    let (mut failed, mut faults, mut executions) = (0u64, 0u64, 0usize);
    for seed in from..from + seeds {
        let report = run_on(seed, planted, path.unwrap_or(Path::of(seed)));
        faults += report.faults.values().sum::<u64>();
        executions += report.executions;
        if !report.violations.is_empty() {
            failed += 1;
            eprintln!("seed {seed} fails: {}", report.violations.join("; "));
            println!("{}", report.replay_command());
        }
        let done = seed - from + 1;
        if done.is_multiple_of(1_000) || done == seeds {
            let rate = done as f64 / started.elapsed().as_secs_f64();
            eprintln!("{done}/{seeds} seeds, {failed} failing, {rate:.0} seeds/s");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{seeds} seeds in {secs:.1} s: {:.0} seeds/s; {faults} faults injected, {executions} executions, {failed} failing",
        seeds as f64 / secs
    );
    i32::from(failed > 0)
}
