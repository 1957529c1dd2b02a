//! TLS certificates for tests, made in-process with rcgen: [`self_signed`] (one certificate
//! and its key as PEM) and [`Pki`] (a CA, a server certificate for `localhost` and 127.0.0.1,
//! a client certificate and an unrelated CA, as PEM files in a scratch directory removed on
//! drop, and the rustls server settings over them).
//!
//! Invariant: every certificate is fresh per call and every [`Pki`] has a directory of its
//! own, so tests running side by side never share keys or files.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A self-signed certificate for `name` (with CN `name`) and its key, as PEM.
pub fn self_signed(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem())
}

/// A CA, a server certificate for `localhost` and 127.0.0.1, and a client certificate, with
/// their PEM files in a scratch directory.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_pem: PathBuf,
    pub client_cert_pem: PathBuf,
    pub client_key_pem: PathBuf,
    /// A CA that signed nothing here: trusting only it fails every check.
    pub other_ca_pem: PathBuf,
    /// The server certificate and key as files, for a real broker's `--tls-cert` /
    /// `--tls-key`.
    pub server_cert_pem: PathBuf,
    pub server_key_pem: PathBuf,
    ca_der: CertificateDer<'static>,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
}

impl Pki {
    pub fn new() -> Pki {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "client-tls-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let (ca_cert, ca_key) = make_ca("fake CA");
        let (other, _) = make_ca("other CA");
        let server_key = rcgen::KeyPair::generate().expect("key");
        let server = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .expect("params")
            .signed_by(&server_key, &ca_cert, &ca_key)
            .expect("server cert");
        let client_key = rcgen::KeyPair::generate().expect("key");
        let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("p");
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-client");
        let client = client_params
            .signed_by(&client_key, &ca_cert, &ca_key)
            .expect("client cert");
        let write = |name: &str, pem: String| {
            let p = dir.join(name);
            std::fs::write(&p, pem).expect("write pem");
            p
        };
        Pki {
            ca_pem: write("ca.pem", ca_cert.pem()),
            other_ca_pem: write("other-ca.pem", other.pem()),
            client_cert_pem: write("client.pem", client.pem()),
            client_key_pem: write("client-key.pem", client_key.serialize_pem()),
            server_cert_pem: write("server.pem", server.pem()),
            server_key_pem: write("server-key.pem", server_key.serialize_pem()),
            ca_der: ca_cert.der().clone(),
            server_chain: vec![server.der().clone()],
            server_key: server_key.serialize_der(),
            dir,
        }
    }

    /// The fake's TLS settings; `verify_clients` requires a client certificate signed by the
    /// CA (nsqd's `require-verify`).
    pub fn server_config(&self, verify_clients: bool) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("versions");
        let builder = if verify_clients {
            let mut roots = RootCertStore::empty();
            roots.add(self.ca_der.clone()).expect("root");
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("verifier");
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        Arc::new(
            builder
                .with_single_cert(self.server_chain.clone(), key)
                .expect("server cert"),
        )
    }
}

impl Default for Pki {
    fn default() -> Self {
        Pki::new()
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn make_ca(name: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("CA cert");
    (cert, key)
}
