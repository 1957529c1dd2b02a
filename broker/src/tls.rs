//! The broker's TLS settings made real: the certificate, key and client-certificate policy
//! of the command line loaded into a rustls `ServerConfig` (ring provider) once at start-up,
//! shared by every shard; and the names `/stats` gives a connection's TLS version and cipher
//! suite, in nsqd's words.
//!
//! Invariants: a broker with `--tls-cert`/`--tls-key` has a `ServerConfig` before any shard
//! starts, or does not start ([`TlsError`], through `startup::StartError`). The client policy
//! is nsqd's: none by default; `require` asks for a certificate and takes any (its handshake
//! signature is still checked); `require-verify` takes only one that chains to
//! `--tls-root-ca-file`. TLS 1.2 and 1.3 only (rustls has nothing older);
//! `--tls-min-version tls1.3` leaves out 1.2.

use crate::config::{ClientAuthPolicy, Config, TlsMinVersion};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use std::path::PathBuf;
use std::sync::Arc;

/// Why the TLS flags cannot be made into a server configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {path}: {what}")]
    Pem {
        flag: &'static str,
        path: PathBuf,
        what: String,
    },
    #[error("--tls-cert/--tls-key: {0}")]
    Config(rustls::Error),
    #[error("--tls-root-ca-file: {0}")]
    Verifier(String),
}

/// The server configuration for `config`'s TLS flags; `None` without a certificate.
pub fn server_config(config: &Config) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_pem_all::<CertificateDer<'static>>("--tls-cert", &tls.cert)?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            flag: "--tls-cert",
            path: tls.cert.clone(),
            what: "no CERTIFICATE in the file".into(),
        });
    }
    let key = read_file("--tls-key", &tls.key).and_then(|bytes| {
        PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
            flag: "--tls-key",
            path: tls.key.clone(),
            what: format!("no private key: {e}"),
        })
    })?;
    let versions: &[&rustls::SupportedProtocolVersion] = match tls.min_version {
        TlsMinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsMinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(TlsError::Config)?;
    let builder = match (tls.client_auth, &tls.root_ca_file) {
        (None, _) => builder.with_no_client_auth(),
        (Some(ClientAuthPolicy::Require), _) => {
            builder.with_client_cert_verifier(Arc::new(AnyClientCert {
                provider: provider.clone(),
            }))
        }
        (Some(ClientAuthPolicy::RequireVerify), Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_pem_all::<CertificateDer<'static>>("--tls-root-ca-file", ca)? {
                roots.add(cert).map_err(|e| TlsError::Pem {
                    flag: "--tls-root-ca-file",
                    path: ca.clone(),
                    what: e.to_string(),
                })?;
            }
            if roots.is_empty() {
                return Err(TlsError::Pem {
                    flag: "--tls-root-ca-file",
                    path: ca.clone(),
                    what: "no CERTIFICATE in the file".into(),
                });
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        (Some(ClientAuthPolicy::RequireVerify), None) => {
            return Err(TlsError::Verifier(
                "--tls-client-auth-policy require-verify needs the CA that signs client \
                 certificates (--tls-root-ca-file)"
                    .into(),
            ))
        }
    };
    let server = builder
        .with_single_cert(certs, key)
        .map_err(TlsError::Config)?;
    Ok(Some(Arc::new(server)))
}

fn read_file(flag: &'static str, path: &PathBuf) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.clone(),
        source,
    })
}

fn read_pem_all<T: PemObject>(flag: &'static str, path: &PathBuf) -> Result<Vec<T>, TlsError> {
    let bytes = read_file(flag, path)?;
    T::pem_slice_iter(&bytes)
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| TlsError::Pem {
            flag,
            path: path.clone(),
            what: e.to_string(),
        })
}

/// `require`: a client must present a certificate, any certificate (nsqd's
/// `RequireAnyClientCert`); the handshake still proves it holds the certificate's key.
#[derive(Debug)]
struct AnyClientCert {
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
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

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS version as nsqd's `/stats` writes it (`TLS1.2`, `TLS1.3`).
pub fn version_name(v: rustls::ProtocolVersion) -> String {
    match v {
        rustls::ProtocolVersion::TLSv1_0 => "TLS1.0".into(),
        rustls::ProtocolVersion::TLSv1_1 => "TLS1.1".into(),
        rustls::ProtocolVersion::TLSv1_2 => "TLS1.2".into(),
        rustls::ProtocolVersion::TLSv1_3 => "TLS1.3".into(),
        other => format!("Unknown {}", u16::from(other)),
    }
}

/// A cipher suite as nsqd's `/stats` writes it: the Go name of the few suites nsqd's table
/// names (of rustls's, the two ECDHE AES-128-GCM ones), else `Unknown <number>`, as nsqd
/// reports every other suite (TLS 1.3's included).
pub fn cipher_suite_name(s: rustls::CipherSuite) -> String {
    match u16::from(s) {
        0xc02f => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".into(),
        0xc02b => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".into(),
        n => format!("Unknown {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_nsqd_reports_them() {
        assert_eq!(version_name(rustls::ProtocolVersion::TLSv1_3), "TLS1.3");
        assert_eq!(
            cipher_suite_name(rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
        );
        assert_eq!(
            cipher_suite_name(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
            "Unknown 4865"
        );
    }
}
