//! The TLS keys of the file: `tls_cert_file`, `tls_key_file` (the gateway listener) and
//! `upstream_ca_file` (roots trusted for an `https://` upstream).

use std::path::Path;
use std::sync::Arc;

use super::Config;

/// TLS settings that passed validation.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The listener's certificate and key, when both files are given.
    pub listener: Option<Arc<rustls::ServerConfig>>,
    /// The upstream client's roots: `upstream_ca_file`'s certificates, else the system's.
    /// `None` for an `http://` upstream without `upstream_ca_file`.
    pub upstream: Option<Arc<rustls::ClientConfig>>,
    /// `(tls_cert_file, tls_key_file)` as written (to tell a reload they changed).
    pub files: (String, String),
}

impl Config {
    /// Reads the certificate, key and CA files; every problem is pushed as `field: why`.
    pub(super) fn tls(&self, https_upstream: bool, errs: &mut Vec<String>) -> TlsSettings {
        let listener = match (self.tls_cert_file.trim(), self.tls_key_file.trim()) {
            ("", "") => None,
            (_, "") => {
                errs.push("tls_key_file: missing; tls_cert_file needs its private key".into());
                None
            }
            ("", _) => {
                errs.push("tls_cert_file: missing; tls_key_file needs its certificate".into());
                None
            }
            (cert, key) => crate::tls::server_config(Path::new(cert), Path::new(key))
                .map_err(|(field, e)| errs.push(format!("{field}: {e}")))
                .ok(),
        };
        let ca = self.upstream_ca_file.trim();
        let upstream = if ca.is_empty() && !https_upstream {
            None
        } else {
            crate::tls::client_config((!ca.is_empty()).then(|| Path::new(ca)))
                .map_err(|e| {
                    let field = if ca.is_empty() {
                        "upstream"
                    } else {
                        "upstream_ca_file"
                    };
                    errs.push(format!("{field}: {e}"));
                })
                .ok()
        };
        TlsSettings {
            listener,
            upstream,
            files: (self.tls_cert_file.clone(), self.tls_key_file.clone()),
        }
    }
}
