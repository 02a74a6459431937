//! [`DbFile`]: the database file the store opened, and whether it is still the same file.
//!
//! On Unix, a database file deleted while open stays readable and writable through the
//! connections that hold it, but nothing written to it survives a restart, and a file put in
//! its place is another database. The store checks the file's identity before every write
//! batch and every read, and answers `Unavailable` once it changed, instead of reporting
//! writes as recorded.

use std::path::{Path, PathBuf};

use crate::error::{Result, SqliteStoreError};

/// The database file and its identity when the store opened it.
#[derive(Debug)]
pub(crate) struct DbFile {
    path: PathBuf,
    id: Option<FileId>,
}

/// What tells two files apart: (device, inode) on Unix; existence elsewhere.
type FileId = (u64, u64);

impl DbFile {
    /// Records the identity of `path` (call it once the file is open, so it exists).
    pub(crate) fn new(path: PathBuf) -> Self {
        let id = file_id(&path);
        Self { path, id }
    }

    /// The database file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that the file is still there, and still the file the store opened.
    ///
    /// # Errors
    /// [`SqliteStoreError::FileGone`] otherwise.
    pub(crate) fn check(&self) -> Result<()> {
        match (self.id, file_id(&self.path)) {
            (Some(opened), Some(now)) if opened == now => Ok(()),
            _ => Err(SqliteStoreError::FileGone {
                path: self.path.clone(),
            }),
        }
    }
}

#[cfg(unix)]
fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|_| (0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_or_replaced_file_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        std::fs::write(&path, b"one").unwrap();
        // Held open, as the store's connections hold it, so its inode is not reused.
        let _held = std::fs::File::open(&path).unwrap();
        let file = DbFile::new(path.clone());
        file.check().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            file.check(),
            Err(SqliteStoreError::FileGone { .. })
        ));
        std::fs::write(dir.path().join("b.db"), b"two").unwrap();
        std::fs::rename(dir.path().join("b.db"), &path).unwrap();
        #[cfg(unix)]
        assert!(file.check().is_err(), "another file under the same name");
    }
}
