//! The forward journal's keys (`forward_journal_file`, `forward_journal_window`,
//! `failover_grace`): checked (PostgreSQL only, a window of at least 1 s, a file path that is
//! not a directory) and turned into the store's [`ForwardJournalOptions`], which only the
//! serving commands (`serve`, `key-service`) pass to the store: the file is locked by the
//! process that runs on it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use idemgate_postgres::ForwardJournalOptions;

use super::parse::duration;
use super::Config;
use crate::store::{OpenOptions, StoreUrl};

/// The shortest `forward_journal_window` accepted: entries are confirmed once a second.
const MIN_WINDOW: Duration = Duration::from_secs(1);
/// The longest `forward_journal_window` accepted: a day of entries.
const MAX_WINDOW: Duration = Duration::from_secs(86_400);
/// The shortest `failover_grace` accepted: every process checks its connections once a
/// second, so a shorter grace opens before the others have noticed the failover.
const MIN_GRACE: Duration = Duration::from_secs(2);
/// The longest `failover_grace` accepted: every new key waits this long after a failover.
const MAX_GRACE: Duration = Duration::from_secs(600);

impl Config {
    /// The forward journal of `forward_journal_file` (made absolute against the working
    /// directory), with `forward_journal_window` and `failover_grace` (an invalid duration
    /// keeps its default: `Config::journal_section` reports it); `None` when the file is not
    /// set.
    pub fn forward_journal(&self) -> Option<ForwardJournalOptions> {
        let path = self.forward_journal_path()?;
        let defaults = ForwardJournalOptions::new(&path);
        let parsed = |value: &str| humantime::parse_duration(value).ok();
        Some(ForwardJournalOptions {
            window: parsed(&self.forward_journal_window).unwrap_or(defaults.window),
            failover_grace: parsed(&self.failover_grace).unwrap_or(defaults.failover_grace),
            path,
        })
    }

    /// The store's opening options for the serving commands, `serve` and `key-service`:
    /// [`Config::open_options`] with the forward journal. Every other command opens the store
    /// with [`Config::open_options`], which has none (the running process holds the file).
    pub fn serving_open_options(&self) -> OpenOptions {
        let mut options = self.open_options();
        options.replication.forward_journal = self.forward_journal();
        options
    }

    /// `forward_journal_file`, absolute (relative to the working directory, as every path of
    /// the file is); `None` when empty.
    fn forward_journal_path(&self) -> Option<PathBuf> {
        let path = Path::new(self.forward_journal_file.trim());
        if path.as_os_str().is_empty() {
            return None;
        }
        Some(std::path::absolute(path).unwrap_or_else(|_| path.to_owned()))
    }

    /// The journal's keys, each problem naming its key: a duration that does not parse, a
    /// window outside 1 s..24 h, a grace outside 2 s..10 min, a file path that is a directory, and any of the three set (the
    /// durations: to other than their defaults) on a store that is not PostgreSQL. `store` is
    /// `None` when invalid (reported already).
    pub(super) fn journal_section(&self, store: Option<&StoreUrl>, errs: &mut Vec<String>) {
        let window = duration("forward_journal_window", &self.forward_journal_window, errs);
        let grace = duration("failover_grace", &self.failover_grace, errs);
        if window.is_some_and(|w| w < MIN_WINDOW || w > MAX_WINDOW) {
            errs.push(
                "forward_journal_window: must be between 1s (entries are confirmed once a second) and 24h"
                    .into(),
            );
        }
        if grace.is_some_and(|g| g < MIN_GRACE || g > MAX_GRACE) {
            errs.push(
                "failover_grace: must be between 2s (every process checks its connections once a second) and 10m"
                    .into(),
            );
        }
        let path = self.forward_journal_path();
        if let Some(path) = path.as_ref().filter(|p| p.is_dir()) {
            errs.push(format!(
                "forward_journal_file: {} is a directory; name a file in it (created if missing)",
                path.display()
            ));
        }
        let Some(store) = store else { return };
        if matches!(store, StoreUrl::Postgres(_)) {
            return;
        }
        let defaults = ForwardJournalOptions::new("");
        let set = [
            ("forward_journal_file", path.is_some()),
            (
                "forward_journal_window",
                window.is_some_and(|w| w != defaults.window),
            ),
            (
                "failover_grace",
                grace.is_some_and(|g| g != defaults.failover_grace),
            ),
        ];
        let scheme = self.store_scheme();
        for (key, _) in set.iter().filter(|(_, set)| *set) {
            errs.push(format!(
                "{key}: PostgreSQL only (the forward journal repairs a PostgreSQL failover); the store is {scheme}:"
            ));
        }
    }
}
