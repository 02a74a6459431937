//! `simulate [SEEDS] [--from N] [--planted BUG] [--path tower|proxy]` runs seeds
//! `N..N+SEEDS` (default 1,000 from 0) and prints a progress line and seeds per second;
//! `simulate --seed N [--planted BUG] [--path P]` replays one. Without `--path`, each seed
//! runs on its own (odd seeds through the gateway's proxy).
//! A failing seed prints the one-line command that replays it; the exit status is 1. Bad
//! arguments exit 2 with a message naming them.

// Seeds per second is wall time, outside the simulated clock.
#[allow(clippy::disallowed_types)]
use std::time::Instant;

use clap::Parser;
use idemgate_sim::{run_on, Path, Planted};

/// The deterministic simulation (docs/simulation.md).
#[derive(Debug, Parser)]
#[command(name = "scripts/simulate")]
struct Args {
    /// How many seeds to run (at least 1).
    #[arg(default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "seed")]
    seeds: u64,
    /// The first seed of the run.
    #[arg(long, default_value_t = 0, conflicts_with = "seed")]
    from: u64,
    /// Replay this one seed and print its report.
    #[arg(long)]
    seed: Option<u64>,
    /// Plant a bug the simulation must find.
    #[arg(long, value_parser = planted)]
    planted: Option<Planted>,
    /// Force every seed onto one path (`tower` or `proxy`).
    #[arg(long, value_parser = path)]
    path: Option<Path>,
}

fn planted(name: &str) -> Result<Planted, String> {
    Planted::parse(name).ok_or_else(|| {
        let names: Vec<_> = Planted::ALL.iter().map(|p| p.name()).collect();
        format!("one of {}", names.join(", "))
    })
}

fn path(name: &str) -> Result<Path, String> {
    Path::parse(name).ok_or_else(|| "tower or proxy".to_owned())
}

fn main() {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let report = run_on(seed, args.planted, args.path.unwrap_or(Path::of(seed)));
        println!("{report:#?}");
        std::process::exit(i32::from(!report.violations.is_empty()));
    }
    if args.from.checked_add(args.seeds).is_none() {
        eprintln!(
            "--from {} + {} seeds passes the last seed",
            args.from, args.seeds
        );
        std::process::exit(2);
    }
    std::process::exit(many(&args));
}

fn many(args: &Args) -> i32 {
    #[allow(clippy::disallowed_types)]
    let started = Instant::now();
    let (from, seeds) = (args.from, args.seeds);
    let (mut failed, mut faults, mut executions) = (0u64, 0u64, 0usize);
    for seed in from..from + seeds {
        let report = run_on(seed, args.planted, args.path.unwrap_or(Path::of(seed)));
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
