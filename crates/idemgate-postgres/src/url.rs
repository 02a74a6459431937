//! `postgres://` store URLs: [`PostgresStore::from_url`] and [`PostgresStore::check_url`].

use std::str::FromStr;

use sqlx::postgres::PgConnectOptions;

use crate::error::{PostgresStoreError, Result};
use crate::hosts::{self, HostList};
use crate::options::PostgresOptions;
use crate::store::PostgresStore;

/// The URL forms, for messages.
const URL_FORM: &str =
    "expected postgres://[user[:password]@]host[:port][,host[:port]...]/database\
     [?sslmode=...&target_session_attrs=read-write|primary|any] (or postgresql://)";

impl PostgresStore {
    /// Checks a store URL without connecting: the scheme (`postgres://` or
    /// `postgresql://`) and libpq's syntax (host, port, `sslmode`, ...), with libpq's host
    /// lists (`postgres://app@h1:5432,h2:5433/pay`, hosts without ports too) and
    /// `target_session_attrs` (`read-write` or `primary`, the default, or `any`). Every host
    /// of a list shares the user, password, database and parameters.
    ///
    /// ```
    /// use idemgate_postgres::{PostgresStore, PostgresStoreError};
    ///
    /// PostgresStore::check_url("postgres://app@db:5432/pay?sslmode=require")?;
    /// PostgresStore::check_url("postgres://app@db1,db2:5433/pay?target_session_attrs=primary")?;
    /// let err = PostgresStore::check_url("mysql://app:secret@db/pay").unwrap_err();
    /// assert!(matches!(err, PostgresStoreError::InvalidUrl { .. }));
    /// assert!(!err.to_string().contains("secret"));
    /// # Ok::<(), PostgresStoreError>(())
    /// ```
    ///
    /// # Errors
    /// [`PostgresStoreError::InvalidUrl`], naming what is wrong but never repeating the URL
    /// (it may hold a password).
    pub fn check_url(url: &str) -> Result<()> {
        parse(url).map(drop)
    }

    /// Connects to the database `url` names, with `options` (see
    /// [`PostgresStore::connect_with`]), after [`PostgresStore::check_url`].
    ///
    /// # Errors
    /// [`PostgresStoreError::InvalidUrl`], or as [`PostgresStore::connect_with`].
    pub async fn from_url(url: &str, options: &PostgresOptions) -> Result<Self> {
        parse(url)?;
        Self::connect_with(url, options).await
    }
}

/// Checks `url` and splits it by host (`hosts.rs`).
pub(crate) fn parse(url: &str) -> Result<HostList> {
    let invalid = |reason: String| PostgresStoreError::InvalidUrl { reason };
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("postgres" | "postgresql")) {
        return Err(invalid(URL_FORM.into()));
    }
    let list = hosts::split(url).map_err(|e| invalid(format!("{e}; {URL_FORM}")))?;
    check_parameters(url).map_err(invalid)?;
    for host in &list.urls {
        // sqlx's messages name the part that is wrong, not the password.
        PgConnectOptions::from_str(host).map_err(|e| invalid(format!("{e}; {URL_FORM}")))?;
    }
    Ok(list)
}

/// The query parameters the driver reads (sqlx 0.8's `PgConnectOptions::from_str`) and
/// `target_session_attrs`. Any other is refused here, naming it: the driver would ignore it
/// and log its value, which may be a secret (`sslpassword`), and a setting it silently
/// drops (`?synchronous_commit=off`) must not look applied.
const PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
    "target_session_attrs",
];

/// `Err` naming the first query parameter of `url` not in [`PARAMETERS`] (never its value).
fn check_parameters(url: &str) -> Result<(), String> {
    let query = url.split('#').next().unwrap_or("");
    let Some((_, query)) = query.split_once('?') else {
        return Ok(());
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let name = pair.split_once('=').map_or(pair, |(name, _)| name);
        if !PARAMETERS.contains(&name) {
            return Err(format!(
                "unknown parameter {name:?}: the driver would ignore it (server settings go in \
                 options=-c%20name%3Dvalue); known: {}",
                PARAMETERS.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_urls_pass() {
        for url in [
            "postgres://app@127.0.0.1:5432/pay",
            "postgresql://app:secret@db.internal/pay?sslmode=verify-full",
            "postgres://db/pay?options=-c%20statement_timeout%3D5s",
            "postgres://app@h1:5432,h2:5433/pay?target_session_attrs=read-write",
            "postgres://h1,h2/pay?target_session_attrs=primary",
            "postgres://app:secret@db/pay?target_session_attrs=any",
        ] {
            PostgresStore::check_url(url).unwrap();
        }
    }

    #[test]
    fn bad_urls_name_the_problem_without_the_password() {
        for (url, says) in [
            ("mysql://app:secret@db/pay", "expected postgres://"),
            ("db:5432/pay", "expected postgres://"),
            ("postgres://app:secret@db:port/pay", "port"),
            ("postgres://app:secret@db/pay?sslmode=sometimes", "sslmode"),
            ("postgres://app:secret@h1,,h2/pay", "empty host"),
            ("postgres://app:secret@h1,h2:port/pay", "port"),
            (
                "postgres://app:secret@h1/pay?target_session_attrs=standby",
                "target_session_attrs",
            ),
            (
                "postgres://app@h1/pay?sslmode=require&sslpassword=secret",
                "unknown parameter \"sslpassword\"",
            ),
            (
                "postgres://app@h1,h2/pay?synchronous_commit=secret",
                "unknown parameter \"synchronous_commit\"",
            ),
        ] {
            let err = PostgresStore::check_url(url).unwrap_err();
            assert!(
                matches!(err, PostgresStoreError::InvalidUrl { .. }),
                "{url}: {err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(says), "{url}: {text}");
            assert!(!text.contains("secret"), "{url}: {text}");
        }
    }
}
