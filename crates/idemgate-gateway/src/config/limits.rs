//! The connection section of a [`Config`]: the listeners' timeouts and `max_connections`
//! ([`crate::connections::Limits`]), read by `serve` and `key-service` alike.

use std::time::Duration;

use super::parse::duration;
use super::Config;
use crate::connections::Limits;

/// Largest accepted `max_connections`.
pub const MAX_CONNECTIONS_LIMIT: usize = 1_000_000;

impl Config {
    /// `header_read_timeout`, `body_read_timeout`, `idle_timeout` (each more than 0) and
    /// `max_connections` (1 to [`MAX_CONNECTIONS_LIMIT`]); every problem goes to `errs`.
    pub(super) fn connection_section(&self, errs: &mut Vec<String>) -> Option<Limits> {
        let header = positive("header_read_timeout", &self.header_read_timeout, errs);
        let body = positive("body_read_timeout", &self.body_read_timeout, errs);
        let idle = positive("idle_timeout", &self.idle_timeout, errs);
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&self.max_connections) {
            errs.push(format!(
                "max_connections: must be between 1 and {MAX_CONNECTIONS_LIMIT}, got {}",
                self.max_connections
            ));
            return None;
        }
        Some(Limits {
            header_read_timeout: header?,
            body_read_timeout: body?,
            idle_timeout: idle?,
            max_connections: self.max_connections,
        })
    }
}

/// A duration more than 0, naming `field` on error.
fn positive(field: &str, value: &str, errs: &mut Vec<String>) -> Option<Duration> {
    let d = duration(field, value, errs)?;
    if d.is_zero() {
        errs.push(format!("{field}: must be more than 0s"));
        return None;
    }
    Some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_limits_defaults() {
        let mut errs = Vec::new();
        let limits = Config::default().connection_section(&mut errs);
        assert_eq!(limits, Some(Limits::default()));
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn bad_values_are_named() {
        let config = Config {
            header_read_timeout: "0s".into(),
            body_read_timeout: "soon".into(),
            idle_timeout: "5s".into(),
            max_connections: 0,
            ..Config::default()
        };
        let mut errs = Vec::new();
        assert_eq!(config.connection_section(&mut errs), None);
        for field in [
            "header_read_timeout:",
            "body_read_timeout:",
            "max_connections:",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(field)),
                "{field} {errs:?}"
            );
        }
        assert_eq!(errs.len(), 3, "{errs:?}");
    }
}
