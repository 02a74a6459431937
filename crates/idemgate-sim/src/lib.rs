//! The deterministic simulation of idemgate (issue 26, part 2; `docs/simulation.md`).
//!
//! The real tower layer ([`idemgate_tower::IdempotencyLayer`]) and the real lifecycle it
//! runs, over the real [`idemgate_core::MemoryStore`] behind fault-injecting wrappers, a
//! simulated upstream, crashing gateways, a failing-over store and a model of the forward
//! journal, on a paused single-threaded tokio runtime: one seed, one run, the same trace
//! every time.
//!
//! # Layout
//! - [`rng`]: the seeded source.
//! - [`cluster`]: the store (primary, lagging standby, outages, clock jumps, failover).
//! - [`slot`]: the store as one gateway instance sees it, with its faults and crash.
//! - [`journal`]: the forward journal's rules.
//! - [`upstream`], [`gateway`], [`client`]: the operation, the gateways, the clients.
//! - [`wire`], [`served`]: the proxy path ([`Path::Proxy`]): the gateway's real proxy over
//!   in-memory connections to the upstream, served by hyper, with connection faults.
//! - [`world`]: one run; [`check`]: the checks after it.
//!
//! # Examples
//! ```
//! let report = idemgate_sim::run(7, None);
//! assert!(report.violations.is_empty(), "{}", report.replay_command());
//! ```

pub mod check;
pub mod client;
pub mod cluster;
pub mod gateway;
pub mod journal;
pub mod rng;
pub mod served;
pub mod slot;
pub mod upstream;
pub mod wire;
pub mod world;

use std::collections::BTreeMap;

/// A bug planted on purpose, which the simulation must find (each as the protocol model's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planted {
    /// `renew` without its fence check (a store wrapper).
    RenewUnfenced,
    /// A lapsed lease taken over on a route left at the defaults (the route's policy).
    TakeoverByDefault,
    /// The forward journal not consulted after a failover (no gate, no restore).
    JournalIgnored,
    /// A take-over whose forward did nothing releases (deletes) the record (a runtime
    /// switch in the lifecycle, with the `planted-bugs` feature).
    TakeoverReleaseDeletes,
}

impl Planted {
    /// Every planted bug.
    pub const ALL: [Planted; 4] = [
        Self::RenewUnfenced,
        Self::TakeoverByDefault,
        Self::JournalIgnored,
        Self::TakeoverReleaseDeletes,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::RenewUnfenced => "renew-unfenced",
            Self::TakeoverByDefault => "takeover-by-default",
            Self::JournalIgnored => "journal-ignored",
            Self::TakeoverReleaseDeletes => "takeover-release-deletes",
        }
    }

    /// The bug named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// How a run's gateways reach the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// The upstream is a tower service behind the layer.
    Tower,
    /// The layer wraps the gateway's real proxy (`idemgate_gateway::proxy::Proxy`), over
    /// in-memory connections to the upstream served by hyper ([`wire`], [`served`]).
    Proxy,
}

impl Path {
    /// The path of `seed` unless one is forced: the proxy for odd seeds.
    pub fn of(seed: u64) -> Self {
        match seed % 2 {
            1 => Self::Proxy,
            _ => Self::Tower,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tower => "tower",
            Self::Proxy => "proxy",
        }
    }

    /// The path named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Tower, Self::Proxy]
            .into_iter()
            .find(|p| p.name() == name)
    }
}

/// What one run found.
#[derive(Clone, Debug)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The planted bug, if any.
    pub planted: Option<Planted>,
    /// How the gateways reached the upstream.
    pub path: Path,
    /// Every check that failed, in words.
    pub violations: Vec<String>,
    /// The trace's SHA-256: equal for two runs of one seed.
    pub digest: String,
    /// Events in the trace.
    pub events: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Executions of the operation (all keys).
    pub executions: usize,
    /// Failovers.
    pub failovers: u32,
}

impl Report {
    /// The one-line command that replays this run exactly.
    pub fn replay_command(&self) -> String {
        let mut command = format!("scripts/simulate --seed {}", self.seed);
        if let Some(p) = self.planted {
            command += &format!(" --planted {}", p.name());
        }
        if self.path != Path::of(self.seed) {
            command += &format!(" --path {}", self.path.name());
        }
        command
    }
}

/// Runs `seed` (with `planted`, if any) on a fresh paused single-threaded runtime, on the
/// seed's own [`Path`].
///
/// # Panics
/// If the runtime cannot be built, or `planted` needs the `planted-bugs` feature and this
/// build lacks it.
pub fn run(seed: u64, planted: Option<Planted>) -> Report {
    run_on(seed, planted, Path::of(seed))
}

/// [`run`] on `path`, whatever the seed's own.
///
/// # Panics
/// As [`run`].
pub fn run_on(seed: u64, planted: Option<Planted>, path: Path) -> Report {
    plant(planted);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let report = rt.block_on(world::simulate(seed, planted, path));
    // Dropping the runtime drops the crashed instances' tasks, frozen where they died.
    drop(rt);
    plant(None);
    report
}

#[cfg(feature = "planted-bugs")]
fn plant(planted: Option<Planted>) {
    let on = planted == Some(Planted::TakeoverReleaseDeletes);
    idemgate_core::lifecycle::planted::plant_takeover_release_deletes(on);
}

#[cfg(not(feature = "planted-bugs"))]
fn plant(planted: Option<Planted>) {
    assert!(
        planted != Some(Planted::TakeoverReleaseDeletes),
        "this planted bug needs the `planted-bugs` feature"
    );
}
