//! TLS with rustls (ring provider): the upstream client's trust roots (`https://` upstreams)
//! and the gateway listener's certificate (`tls_cert_file`, `tls_key_file`).
//!
//! Handshakes on the listener run in their own tasks ([`TlsListener`]), so a slow or silent
//! client cannot hold up the accept loop; one that has not finished within
//! [`HANDSHAKE_TIMEOUT`] is dropped.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// Longest time a client may take to complete the TLS handshake on the gateway listener.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file (RFC 7468), in order.
///
/// # Errors
/// `cannot read PATH: ...`, `PATH: not PEM ...` or `PATH: no CERTIFICATE block`, for the
/// caller to prefix with the field name.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let at = path.display();
    let bytes = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{at}: not PEM certificates ({e})"))?;
    if certs.is_empty() {
        return Err(format!("{at}: no `-----BEGIN CERTIFICATE-----` block"));
    }
    Ok(certs)
}

/// Most bytes of a PEM file read (a CA bundle is a few hundred KiB): a path such as
/// `/dev/zero` is refused instead of filling memory.
const MAX_PEM_BYTES: u64 = 16 * 1024 * 1024;

/// The bytes of the PEM file at `path`, at most [`MAX_PEM_BYTES`].
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let at = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {at}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {at}: {e}"))?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(format!("{at}: over {MAX_PEM_BYTES} bytes, not a PEM file"));
    }
    Ok(bytes)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
///
/// # Errors
/// `cannot read PATH: ...` or `PATH: no private key ...`.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let at = path.display();
    let bytes = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| format!("{at}: no PEM private key (PKCS#8, PKCS#1 or SEC1) ({e})"))
}

/// The upstream client's TLS settings: trusts the certificates of `ca_file` (PEM) if given,
/// else the system's roots (`rustls-native-certs`: the OS store, or `SSL_CERT_FILE`).
///
/// # Errors
/// The CA file cannot be read or holds no usable certificate; no system root was found.
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in read_certs(path)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: unusable CA certificate ({e})", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(format!(
                    "no system CA certificates found ({} errors); install the system's CA bundle or set upstream_ca_file",
                    found.errors.len()
                ));
            }
        }
    }
    trusting(roots)
}

/// Client TLS settings (ring, the safe default protocol versions) trusting `roots` only.
///
/// # Errors
/// When the provider supports none of the default protocol versions.
pub fn trusting(roots: RootCertStore) -> Result<Arc<ClientConfig>, String> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The listener's TLS settings from a certificate chain file and its key file (both PEM).
/// ALPN offers `http/1.1` (the gateway serves HTTP/1.1).
///
/// # Errors
/// `(field, message)`: which file is at fault (`tls_cert_file` or `tls_key_file`) and why,
/// including a key that does not match the certificate.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, (&'static str, String)> {
    let certs = read_certs(cert).map_err(|e| ("tls_cert_file", e))?;
    let key = read_key(key).map_err(|e| ("tls_key_file", e))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ("tls_cert_file", e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            (
                "tls_key_file",
                format!("does not fit the certificate of tls_cert_file ({e})"),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

type Handshake = (io::Result<TlsStream<Box<dyn Io>>>, SocketAddr);

/// A connection the TLS listener can wrap.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// An [`axum::serve::Listener`] that completes a TLS handshake on each connection of `inner`
/// before handing it to the server; failed or timed-out handshakes are logged (debug) and
/// dropped.
#[derive(Debug)]
pub struct TlsListener<L> {
    inner: L,
    config: Arc<ServerConfig>,
    pending: JoinSet<Handshake>,
}

impl<L> TlsListener<L> {
    /// Serves TLS with `config` on `inner`'s connections.
    pub fn new(inner: L, config: Arc<ServerConfig>) -> Self {
        Self {
            inner,
            config,
            pending: JoinSet::new(),
        }
    }
}

impl<L> axum::serve::Listener for TlsListener<L>
where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    type Io = TlsStream<Box<dyn Io>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, SocketAddr) {
        loop {
            tokio::select! {
                (io, addr) = self.inner.accept() => {
                    let acceptor = TlsAcceptor::from(self.config.clone());
                    let io: Box<dyn Io> = Box::new(io);
                    self.pending.spawn(async move {
                        let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io))
                            .await
                            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
                        (tls, addr)
                    });
                }
                Some(done) = self.pending.join_next(), if !self.pending.is_empty() => {
                    match done {
                        Ok((Ok(tls), addr)) => return (tls, addr),
                        Ok((Err(e), addr)) => {
                            tracing::debug!(client = %addr, error = %e, "TLS handshake failed");
                        }
                        Err(e) => tracing::warn!(error = %e, "TLS handshake task failed"),
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn an_endless_file_is_refused_not_read_whole() {
        for read in [
            |p: &Path| super::read_certs(p).map(drop),
            |p: &Path| super::read_key(p).map(drop),
        ] {
            let e = read(Path::new("/dev/zero")).unwrap_err();
            assert!(e.starts_with("/dev/zero: over 16777216 bytes"), "{e}");
        }
    }
}
