//! `idemgate migrate`: creates or upgrades the store's schema and says what it did.

use anyhow::Context;

use idemgate_sqlite::SqliteLocation;

use crate::store::{open, redact, AnyStore, OpenOptions, StoreUrl};

/// Migrates the store `url` names and returns one line saying what changed: the file or
/// table created, the migrations applied, or that nothing was pending.
///
/// # Errors
/// When the store cannot be opened or migrated (naming it, without credentials).
pub async fn run(url: &StoreUrl, opts: &OpenOptions) -> anyhow::Result<String> {
    let mut opts = opts.clone();
    opts.migrate = false;
    opts.create = true;
    match url {
        StoreUrl::Memory => Ok("memory:// has no schema; nothing to do".into()),
        StoreUrl::KeyService(_) => {
            Ok("idemgate:// has no schema here; the key service migrates its own store".into())
        }
        StoreUrl::Redis(u) => {
            open(url, &opts).await?;
            Ok(format!(
                "redis store {}: no schema to migrate; nothing to do",
                redact(u)
            ))
        }
        StoreUrl::Sqlite(SqliteLocation::File(path)) => {
            let before = path
                .exists()
                .then(|| user_version(path.as_path()))
                .transpose()?;
            // Opening migrates (in one transaction).
            drop(open(url, &opts).await?);
            let after = user_version(path.as_path())?;
            let p = path.display();
            Ok(match before {
                None => format!("created sqlite store {p} at schema version {after}"),
                Some(b) if b < after => {
                    format!("migrated sqlite store {p} from schema version {b} to {after}")
                }
                Some(_) => {
                    format!("sqlite store {p}: schema version {after} is up to date; nothing to do")
                }
            })
        }
        StoreUrl::Postgres(u) => {
            let AnyStore::Postgres(store) = open(url, &opts).await? else {
                unreachable!("a postgres URL opens a postgres store")
            };
            let applied = store
                .migrate_applied()
                .await
                .with_context(|| format!("cannot migrate the postgres store {}", redact(u)))?;
            let at = format!("postgres store {}, table {}", redact(u), store.table_name());
            Ok(match applied.is_empty() {
                true => format!("{at}: up to date; nothing to do"),
                false => format!("{at}: applied migrations {}", applied.join(", ")),
            })
        }
        // `sqlite::memory:`
        _ => Ok("an in-memory store has no schema; nothing to do".into()),
    }
}

/// `PRAGMA user_version` of a SQLite file, opened read-only.
fn user_version(path: &std::path::Path) -> anyhow::Result<i64> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open sqlite store {}", path.display()))?;
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .with_context(|| format!("cannot read the schema version of {}", path.display()))
}
