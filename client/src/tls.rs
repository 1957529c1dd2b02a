//! TLS settings ([`TlsConfig`], go-nsq's `tls_config`) and the rustls client configuration
//! built from them: the trusted roots (a CA file, else the system's bundle), an optional
//! client certificate and key, and the name the server's certificate must carry.
//!
//! Invariants: certificates are checked by rustls's webpki verifier with the `ring` provider,
//! unless `insecure_skip_verify` says otherwise, and even then the handshake's signatures
//! are checked against the certificate the server presented (only the chain and the name are
//! not); files are read once, when a producer or consumer is made, and a file that cannot be
//! read or holds no usable PEM is an [`Error::Tls`] naming it. PEM reading and the
//! skip-verify verifier are `nsq_common::tls`'s, shared with the broker and admin-ui.

use crate::error::{Error, Result};
use nsq_common::host_of;
use nsq_common::tls::{read_certs, read_private_key, read_roots, AnyCertificate, PemError};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use std::path::PathBuf;
use std::sync::Arc;

/// Where the trusted roots come from when no `root_ca_file` is set: the bundles Linux
/// distributions install (Debian/Ubuntu, Fedora/RHEL, openSUSE, Alpine), first found wins.
pub const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// How a connection with `tls_v1` checks the broker and presents itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file of the certificate authorities to trust (nsqd's `--tls-root-ca-file` on the
    /// other side). `None`: the system's bundle.
    pub root_ca_file: Option<PathBuf>,
    /// PEM file of the client certificate (chain), for brokers that require one
    /// (`--tls-client-auth-policy`); needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub key_file: Option<PathBuf>,
    /// The name the broker's certificate must carry; `None`: the host of the address
    /// connected to (a name or an IP address).
    pub server_name: Option<String>,
    /// Accept any certificate the broker presents (encryption without authentication).
    pub insecure_skip_verify: bool,
}

impl TlsConfig {
    /// Trusts the certificate authorities in `path` (PEM).
    pub fn root_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.root_ca_file = Some(path.into());
        self
    }

    /// Presents the certificate in `cert` with the private key in `key` (PEM files).
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    /// Checks the broker's certificate against `name` instead of the address's host.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Skips checking the broker's certificate chain and name.
    pub fn insecure_skip_verify(mut self, value: bool) -> Self {
        self.insecure_skip_verify = value;
        self
    }

    /// The rustls configuration these settings describe.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>> {
        let provider = nsq_common::tls::provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Tls(format!("protocol versions: {e}")))?;
        let builder = if self.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(AnyCertificate::new(provider))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert).map_err(tls_error)?;
                let key = read_private_key(key).map_err(tls_error)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Error::Tls(format!("client certificate: {e}")))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(Error::Tls(
                    "a client certificate needs both cert_file and key_file".into(),
                ))
            }
        };
        Ok(Arc::new(config))
    }

    fn roots(&self) -> Result<RootCertStore> {
        let file = match &self.root_ca_file {
            Some(f) => f.clone(),
            None => SYSTEM_CA_BUNDLES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
                .ok_or_else(|| {
                    Error::Tls("no root_ca_file set and no system CA bundle found".into())
                })?,
        };
        read_roots(&file).map_err(tls_error)
    }

    /// The name to check the broker's certificate against when connecting to `addr`.
    pub fn server_name_for(&self, addr: &str) -> Result<ServerName<'static>> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => host_of(addr).to_string(),
        };
        ServerName::try_from(name.clone())
            .map_err(|_| Error::Tls(format!("{name:?} is not a valid server name")))
    }
}

/// A PEM file's error as the client reports it (naming the file).
fn tls_error(e: PemError) -> Error {
    Error::Tls(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("127.0.0.1:4150"), "127.0.0.1");
        assert_eq!(host_of("broker.example:4150"), "broker.example");
        assert_eq!(host_of("[::1]:4150"), "::1");
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
        let ip = TlsConfig::default().server_name_for("127.0.0.1:4150");
        assert!(matches!(ip, Ok(ServerName::IpAddress(_))), "{ip:?}");
        let named = TlsConfig::default()
            .server_name("nsqd.local")
            .server_name_for("127.0.0.1:4150");
        assert!(matches!(named, Ok(ServerName::DnsName(_))), "{named:?}");
    }

    #[test]
    fn unreadable_files_are_tls_errors_naming_them() {
        let cfg = TlsConfig::default().root_ca_file("/nonexistent/ca.pem");
        let e = cfg.client_config().expect_err("no such file");
        assert!(
            matches!(&e, Error::Tls(t) if t.contains("/nonexistent/ca.pem")),
            "{e}"
        );
        let half = TlsConfig {
            cert_file: Some("/x.pem".into()),
            insecure_skip_verify: true,
            ..TlsConfig::default()
        };
        assert!(matches!(half.client_config(), Err(Error::Tls(_))));
        let insecure = TlsConfig::default().insecure_skip_verify(true);
        assert!(insecure.client_config().is_ok());
    }
}
