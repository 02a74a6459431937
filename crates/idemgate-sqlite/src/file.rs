//! [`DbFile`]: the files the store opened (the database, its `-wal` and its `-shm`), and
//! whether they are still the same files.
//!
//! On Unix, a file deleted while open stays readable and writable through the connections
//! that hold it, but nothing written to it survives a restart, and a file put in its place
//! belongs to another database: a deleted `-wal` takes every commit not yet checkpointed
//! with it, and a `-shm` (the wal-index every process on the database shares) deleted or
//! replaced lets the next process (`idemgate purge`, another gateway) build a second
//! wal-index over the same log, which corrupts it. A `-shm` truncated while mapped is worse:
//! the next access to the lost pages kills the process with `SIGBUS`. So the store checks
//! the three files (identity, and that the `-shm` never shrank) before every write batch,
//! after its commit, before every read and before every checkpoint, and answers
//! `Unavailable` once one changed, without touching the database again.
//!
//! A deleted or replaced file that comes back (renamed back) is the same file again and
//! the store resumes; a truncated `-shm` is refused until the process restarts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Result, SqliteStoreError};

/// The database's files and their identity when the store opened them.
#[derive(Debug)]
pub(crate) struct DbFile {
    /// The database file, then `-wal` and `-shm`.
    files: [Watched; 3],
    /// Largest size of the `-shm` seen so far, in bytes (SQLite never shrinks it while a
    /// connection is open).
    shm_size: AtomicU64,
    /// The `-shm` was seen shrunk: its mapping may fault, so never touch it again.
    shm_truncated: AtomicBool,
    /// The change was logged (once per change; reset when the files are back).
    reported: AtomicBool,
}

#[derive(Debug)]
struct Watched {
    path: PathBuf,
    /// `None`: the file did not exist at open (not in WAL mode); it is not checked.
    id: Option<FileId>,
}

/// What tells two files apart: (device, inode) on Unix; existence elsewhere.
type FileId = (u64, u64);

/// Index of the `-shm` in [`DbFile::files`].
const SHM: usize = 2;

impl DbFile {
    /// Records the identity of `path` and of its `-wal` and `-shm` (call it once the
    /// database is open in WAL mode, so they exist).
    pub(crate) fn new(path: PathBuf) -> Self {
        let watched = |suffix: &str| {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            let path = PathBuf::from(p);
            let id = stat(&path).map(|(id, _)| id);
            Watched { path, id }
        };
        let files = [watched(""), watched("-wal"), watched("-shm")];
        let shm_size = stat(&files[SHM].path).map_or(0, |(_, len)| len);
        Self {
            files,
            shm_size: AtomicU64::new(shm_size),
            shm_truncated: AtomicBool::new(false),
            reported: AtomicBool::new(false),
        }
    }

    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.files[0].path
    }

    /// Checks that the database file, its `-wal` and its `-shm` are still there, still the
    /// files the store opened, and that the `-shm` did not shrink.
    ///
    /// # Errors
    /// [`SqliteStoreError::FileGone`] (naming the file that changed) otherwise.
    pub(crate) fn check(&self) -> Result<()> {
        let gone = self.gone();
        gone.map_or(Ok(()), |path| Err(SqliteStoreError::FileGone { path }))
    }

    /// As [`DbFile::check`]: the file that changed, if any. The first change after success
    /// is logged at `error` level with the file's path.
    pub(crate) fn gone(&self) -> Option<PathBuf> {
        match self.changed() {
            None => {
                if self.reported.swap(false, Ordering::Relaxed) {
                    tracing::warn!(path = %self.path().display(), "the SQLite database files are back; the store answers again");
                }
                None
            }
            Some((path, what)) => {
                if !self.reported.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        path = %path.display(),
                        "SQLite file {what} while the store had it open: every operation \
                         answers 503 until the file is back; restart idemgate once the files \
                         are in order"
                    );
                }
                Some(path.to_path_buf())
            }
        }
    }

    /// The first file that changed, and how.
    fn changed(&self) -> Option<(&Path, &'static str)> {
        let shm = &self.files[SHM].path;
        if self.shm_truncated.load(Ordering::Relaxed) {
            return Some((shm, "was truncated"));
        }
        for (i, file) in self.files.iter().enumerate() {
            let Some(opened) = file.id else { continue };
            match stat(&file.path) {
                None => return Some((&file.path, "was deleted")),
                Some((now, _)) if now != opened => return Some((&file.path, "was replaced")),
                Some((_, len)) if i == SHM => {
                    if self.shm_size.fetch_max(len, Ordering::Relaxed) > len {
                        self.shm_truncated.store(true, Ordering::Relaxed);
                        return Some((shm, "was truncated"));
                    }
                }
                Some(_) => {}
            }
        }
        None
    }

    /// Closes `conn` if the files are in order; otherwise leaks it, because closing the
    /// last connection checkpoints through the `-shm` (a truncated one faults) and deletes
    /// the `-wal` and `-shm` by name (which may now be another database's).
    pub(crate) fn close(&self, conn: rusqlite::Connection) {
        if self.gone().is_none() {
            // An error here has no one to report to.
            let _ = conn.close();
        } else {
            // Deliberately leaked (its memory and file handles, until the process exits).
            let _leaked = std::mem::ManuallyDrop::new(conn);
        }
    }
}

#[cfg(unix)]
fn stat(path: &Path) -> Option<(FileId, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| ((m.dev(), m.ino()), m.len()))
}

#[cfg(not(unix))]
fn stat(path: &Path) -> Option<(FileId, u64)> {
    std::fs::metadata(path).ok().map(|m| ((0, 0), m.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gone(file: &DbFile, what: &str) -> PathBuf {
        match file.check() {
            Err(SqliteStoreError::FileGone { path }) => path,
            other => panic!("{what}: {other:?}"),
        }
    }

    fn files(dir: &Path) -> (PathBuf, Vec<std::fs::File>, DbFile) {
        let path = dir.join("a.db");
        // Held open, as the store's connections hold them, so no inode is reused.
        let held = ["", "-wal", "-shm"]
            .iter()
            .map(|s| {
                let p = format!("{}{s}", path.display());
                std::fs::write(&p, b"1234").unwrap();
                std::fs::File::open(&p).unwrap()
            })
            .collect();
        let file = DbFile::new(path.clone());
        file.check().unwrap();
        (path, held, file)
    }

    #[test]
    fn a_deleted_or_replaced_file_is_gone_until_it_is_back() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _held, file) = files(dir.path());
        std::fs::rename(&path, dir.path().join("away")).unwrap();
        assert_eq!(gone(&file, "deleted"), path);
        std::fs::write(dir.path().join("b.db"), b"two").unwrap();
        std::fs::rename(dir.path().join("b.db"), &path).unwrap();
        #[cfg(unix)]
        assert_eq!(gone(&file, "another file under the same name"), path);
        std::fs::rename(dir.path().join("away"), &path).unwrap();
        file.check().expect("the same file is back");
    }

    #[test]
    fn the_wal_and_shm_are_watched_too() {
        let dir = tempfile::tempdir().unwrap();
        for suffix in ["-wal", "-shm"] {
            let (path, _held, file) = files(dir.path());
            let side = PathBuf::from(format!("{}{suffix}", path.display()));
            std::fs::remove_file(&side).unwrap();
            assert_eq!(gone(&file, suffix), side);
        }
    }

    #[test]
    fn a_shrunk_shm_is_refused_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _held, file) = files(dir.path());
        let shm = PathBuf::from(format!("{}-shm", path.display()));
        std::fs::write(&shm, b"12345678").unwrap();
        file.check().expect("growing is fine");
        std::fs::write(&shm, b"1").unwrap();
        assert_eq!(gone(&file, "truncated"), shm);
        std::fs::write(&shm, b"123456789").unwrap();
        assert_eq!(
            gone(&file, "regrown"),
            shm,
            "the mapping may fault: for good"
        );
    }
}
