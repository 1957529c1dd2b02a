//! The TLS client settings for talking to brokers that serve their HTTP API over HTTPS only,
//! built once at start-up from nsqadmin's `--http-client-tls-*` flags: the roots trusted (the
//! `--http-client-tls-root-ca-file` alone when given, else the system's), the certificate
//! presented when a broker asks for one (`--http-client-tls-cert` with `--http-client-tls-key`),
//! and, with `--http-client-tls-insecure-skip-verify`, no check of the broker's certificate.
//!
//! Invariants: rustls with the `ring` provider and its safe protocol versions (TLS 1.2 and
//! 1.3); skipping verification skips only the certificate's chain and name, never the
//! handshake's signatures; a file that cannot be read or holds nothing usable is an error at
//! start-up, in nsqadmin's words, never a silent fallback. PEM reading and the skip-verify
//! verifier are `nsq_common::tls`'s, shared with the broker and the client library.

use nsq_common::tls::{read_certs, read_private_key, read_roots, AnyCertificate, PemError};
use rustls::{ClientConfig, RootCertStore};
use std::path::PathBuf;
use std::sync::Arc;
use tracing::warn;

/// The `--http-client-tls-*` flags.
#[derive(Debug, Clone, Default)]
pub struct TlsFlags {
    /// `--http-client-tls-insecure-skip-verify`: accept any certificate.
    pub insecure_skip_verify: bool,
    /// `--http-client-tls-root-ca-file`: the only roots trusted (PEM).
    pub root_ca_file: Option<PathBuf>,
    /// `--http-client-tls-cert` and `--http-client-tls-key` (PEM), both or neither.
    pub cert_and_key: Option<(PathBuf, PathBuf)>,
}

/// The client settings the flags describe, or what is wrong with them.
pub fn client_config(flags: &TlsFlags) -> Result<Arc<ClientConfig>, String> {
    let provider = nsq_common::tls::provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS client: {e}"))?;
    let builder = if flags.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(AnyCertificate::new(provider))
    } else {
        builder.with_root_certificates(roots(flags.root_ca_file.as_ref())?)
    };
    let config = match &flags.cert_and_key {
        Some((cert, key)) => {
            let failed = |e: &dyn std::fmt::Display| {
                format!(
                    "failed to LoadX509KeyPair {}, {} - {e}",
                    cert.display(),
                    key.display()
                )
            };
            let chain = read_certs(cert).map_err(|e| failed(&e))?;
            let key = read_private_key(key).map_err(|e| failed(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| failed(&e))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The roots a broker's certificate must chain to: the file's, or the system's.
fn roots(root_ca_file: Option<&PathBuf>) -> Result<RootCertStore, String> {
    if let Some(path) = root_ca_file {
        return read_roots(path).map_err(|e| match e {
            PemError::Missing { .. } => format!("failed to AppendCertsFromPEM {}", path.display()),
            e => format!(
                "failed to read TLS root CA file {} - {}",
                path.display(),
                e.reason()
            ),
        });
    }
    let mut roots = RootCertStore::empty();
    let system = rustls_native_certs::load_native_certs();
    for e in &system.errors {
        warn!("system TLS roots: {e}");
    }
    let (added, _) = roots.add_parsable_certificates(system.certs);
    if added == 0 {
        warn!(
            "no system TLS roots found: brokers serving HTTPS will not be trusted \
             without --http-client-tls-root-ca-file"
        );
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, contents: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("admin-ui-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn defaults_and_skip_verify_build() {
        assert!(client_config(&TlsFlags::default()).is_ok());
        let skip = TlsFlags {
            insecure_skip_verify: true,
            ..TlsFlags::default()
        };
        assert!(client_config(&skip).is_ok());
    }

    #[test]
    fn unreadable_or_empty_files_are_refused_in_nsqadmins_words() {
        let missing = TlsFlags {
            root_ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
            ..TlsFlags::default()
        };
        let e = client_config(&missing).unwrap_err();
        assert!(
            e.starts_with("failed to read TLS root CA file /nonexistent/ca.pem"),
            "{e}"
        );

        let empty = TlsFlags {
            root_ca_file: Some(temp_file("empty-ca.pem", "not a certificate\n")),
            ..TlsFlags::default()
        };
        let e = client_config(&empty).unwrap_err();
        assert!(e.starts_with("failed to AppendCertsFromPEM"), "{e}");

        let no_pair = TlsFlags {
            cert_and_key: Some((
                temp_file("empty-cert.pem", ""),
                PathBuf::from("/nonexistent/key.pem"),
            )),
            ..TlsFlags::default()
        };
        let e = client_config(&no_pair).unwrap_err();
        assert!(e.starts_with("failed to LoadX509KeyPair"), "{e}");
    }
}
