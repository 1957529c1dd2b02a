//! TLS pieces the broker, the client library and admin-ui share (feature `tls`), so that each
//! is written once: the crypto provider (rustls on `ring`), PEM files read into rustls's types
//! (a certificate chain, a private key, a root store) with errors that name the file, and the
//! verifier that accepts any certificate: for a client's `insecure_skip_verify` (any server
//! certificate, any name) and for nsqd's `--tls-client-auth-policy require` (any client
//! certificate, but one must be presented).
//!
//! Invariants: accepting any certificate skips only its chain, dates and name; the handshake's
//! signatures are always checked with the provider's algorithms, so the peer still proves it
//! holds the key of the certificate it presented. A file that cannot be read, is not PEM or
//! holds nothing of the kind asked for is a [`PemError`] naming it, never an empty result;
//! each program words it for its own flags.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The crypto provider every TLS configuration of the workspace is built with: `ring` (no
/// aws-lc: it needs cmake and a C toolchain).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why a PEM file gave nothing usable.
#[derive(Debug)]
pub enum PemError {
    /// The file cannot be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid PEM, or an item in it is malformed.
    Parse { path: PathBuf, what: String },
    /// Nothing of the kind wanted in the file (`what`: "CERTIFICATE", "private key", ...).
    Missing { path: PathBuf, what: &'static str },
}

impl PemError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            PemError::Read { path, .. }
            | PemError::Parse { path, .. }
            | PemError::Missing { path, .. } => path,
        }
    }
}

impl PemError {
    /// What is wrong, without the file's name (for messages that name it their own way).
    pub fn reason(&self) -> String {
        match self {
            PemError::Read { source, .. } => format!("cannot read: {source}"),
            PemError::Parse { what, .. } => what.clone(),
            PemError::Missing { what, .. } => format!("no {what} in the file"),
        }
    }
}

impl std::fmt::Display for PemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path().display(), self.reason())
    }
}

impl std::error::Error for PemError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PemError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path).map_err(|source| PemError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Every certificate in a PEM file, in order (a chain: the end entity first); at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PemError::Parse {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(PemError::Missing {
            path: path.to_path_buf(),
            what: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => PemError::Missing {
            path: path.to_path_buf(),
            what: "private key",
        },
        e => PemError::Parse {
            path: path.to_path_buf(),
            what: e.to_string(),
        },
    })
}

/// The certificate authorities of a PEM file as trusted roots. As Go's `AppendCertsFromPEM`,
/// certificates that do not parse as a CA are skipped; none usable is an error.
pub fn read_roots(path: &Path) -> Result<RootCertStore, PemError> {
    let certs = match read_certs(path) {
        Err(PemError::Missing { path, .. }) => {
            return Err(PemError::Missing {
                path,
                what: "usable CA certificate",
            })
        }
        other => other?,
    };
    let mut roots = RootCertStore::empty();
    let (added, _skipped) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(PemError::Missing {
            path: path.to_path_buf(),
            what: "usable CA certificate",
        });
    }
    Ok(roots)
}

/// A verifier that takes any certificate: for a client, whatever server certificate and name
/// (`insecure_skip_verify`); for a server, whatever client certificate, one being required
/// (nsqd's `require`, Go's `RequireAnyClientCert`). The handshake signatures are checked.
#[derive(Debug)]
pub struct AnyCertificate(Arc<CryptoProvider>);

impl AnyCertificate {
    /// Checks signatures with `provider`'s algorithms.
    pub fn new(provider: Arc<CryptoProvider>) -> Arc<AnyCertificate> {
        Arc::new(AnyCertificate(provider))
    }
}

/// The handshake-signature methods, which both verifier traits declare alike: checked with
/// the provider's algorithms against the certificate presented.
macro_rules! handshake_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.0.signature_verification_algorithms;
            verify_tls12_signature(message, cert, dss, algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.0.signature_verification_algorithms;
            verify_tls13_signature(message, cert, dss, algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    };
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    handshake_signatures!();
}

impl ClientCertVerifier for AnyCertificate {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    handshake_signatures!();
}

#[cfg(test)]
mod tests;
