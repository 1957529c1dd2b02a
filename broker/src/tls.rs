//! The broker's TLS settings made real: the certificate, key and client-certificate policy
//! of the command line loaded into a rustls `ServerConfig` (ring provider) once at start-up,
//! shared by every shard (PEM files and the `require` verifier: `nsq_common::tls`); the names
//! `/stats` gives a connection's TLS version and cipher suite, in nsqd's words; and the
//! client certificate's subject common name, for the auth servers ([`subject_common_name`]).
//!
//! Also the `--tls-*` flags' checks ([`settings`]) and what they give ([`TlsSettings`],
//! [`TlsRequired`]), which `crate::config` keeps.
//!
//! [`Reloadable`]: on SIGHUP the files are read again for new connections.
//!
//! Invariants: a broker with `--tls-cert`/`--tls-key` has a `ServerConfig` before any shard
//! starts, or does not start ([`TlsError`], through `startup::StartError`). The client policy
//! is nsqd's: none by default; `require` asks for a certificate and takes any (its handshake
//! signature is still checked); `require-verify` takes only one that chains to
//! `--tls-root-ca-file`. TLS 1.2 and 1.3 only (rustls has nothing older);
//! `--tls-min-version tls1.3` leaves out 1.2.

use nsq_common::tls::{read_certs, read_private_key, read_roots, AnyCertificate, PemError};
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use std::path::PathBuf;
use std::sync::Arc;

/// The certificate, key and client policy of `--tls-*` (files are read at start-up, by
/// [`server_config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub root_ca_file: Option<PathBuf>,
    pub client_auth: Option<ClientAuthPolicy>,
    pub min_version: TlsMinVersion,
}

/// `--tls-client-auth-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuthPolicy {
    /// A client must present a certificate; any will do.
    Require,
    /// A client must present a certificate that chains to `--tls-root-ca-file`.
    RequireVerify,
}

/// `--tls-min-version`: rustls speaks TLS 1.2 and 1.3 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMinVersion {
    Tls12,
    Tls13,
}

/// `--tls-required`, nsqd's three values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsRequired {
    #[default]
    No,
    /// `tcp-https`: TCP clients must upgrade to TLS; plain HTTP stays open.
    ExceptHttp,
    /// `true`: TCP clients must upgrade to TLS (and HTTP should be HTTPS only).
    Yes,
}

/// The `--tls-*` flags as given, for [`settings`].
pub struct Flags<'a> {
    pub cert: &'a str,
    pub key: &'a str,
    pub root_ca_file: &'a str,
    pub client_auth_policy: &'a str,
    pub required: &'a str,
    pub min_version: &'a str,
}

/// Checks the `--tls-*` flags as nsqd does (and refuses what nsqd would silently ignore); the
/// error is the operator's message, naming the flag.
pub fn settings(f: &Flags<'_>) -> Result<(Option<TlsSettings>, TlsRequired), String> {
    let mut required = match f.required.to_ascii_lowercase().as_str() {
        "tcp-https" => TlsRequired::ExceptHttp,
        // Go's strconv.ParseBool, after nsqd lowercased the value.
        "1" | "t" | "true" => TlsRequired::Yes,
        "0" | "f" | "false" => TlsRequired::No,
        _ => {
            return Err(format!(
                "--tls-required {:?}: use true, false or tcp-https",
                f.required
            ))
        }
    };
    let client_auth = match f.client_auth_policy {
        "" => None,
        "require" => Some(ClientAuthPolicy::Require),
        "require-verify" => Some(ClientAuthPolicy::RequireVerify),
        other => {
            return Err(format!(
                "--tls-client-auth-policy {other:?}: use require or require-verify"
            ))
        }
    };
    // nsqd: a client auth policy makes TLS required.
    if client_auth.is_some() && required == TlsRequired::No {
        required = TlsRequired::Yes;
    }
    let min_version = match f.min_version.to_ascii_lowercase().as_str() {
        "" | "tls1.0" | "tls1.1" | "tls1.2" => TlsMinVersion::Tls12,
        "tls1.3" => TlsMinVersion::Tls13,
        other => return Err(format!("--tls-min-version {other:?}: use tls1.2 or tls1.3")),
    };
    if f.cert.is_empty() && f.key.is_empty() {
        if required != TlsRequired::No {
            return Err(
                "--tls-required/--tls-client-auth-policy: cannot require TLS client \
                 connections without TLS key and cert (--tls-cert, --tls-key)"
                    .into(),
            );
        }
        return Ok((None, required));
    }
    if f.cert.is_empty() || f.key.is_empty() {
        return Err("--tls-cert and --tls-key go together: give both".into());
    }
    let settings = TlsSettings {
        cert: PathBuf::from(f.cert),
        key: PathBuf::from(f.key),
        root_ca_file: (!f.root_ca_file.is_empty()).then(|| PathBuf::from(f.root_ca_file)),
        client_auth,
        min_version,
    };
    Ok((Some(settings), required))
}

/// nsqd's `--https-address` default: where the HTTP API is served over TLS when a certificate
/// is given and the flag is not.
pub const DEFAULT_HTTPS_ADDRESS: &str = "0.0.0.0:4152";

/// Where the HTTP API is served over TLS, from `--https-address` as given (`None`: not given)
/// and whether a certificate is: as nsqd, only with a certificate, by default on
/// [`DEFAULT_HTTPS_ADDRESS`], and nowhere when the flag is empty. An address given without a
/// certificate, which nsqd silently leaves closed, is refused.
pub fn https_address(given: Option<&str>, has_cert: bool) -> Result<Option<&str>, String> {
    match (given, has_cert) {
        (Some(""), _) | (None, false) => Ok(None),
        (None, true) => Ok(Some(DEFAULT_HTTPS_ADDRESS)),
        (Some(addr), true) => Ok(Some(addr)),
        (Some(addr), false) => Err(format!(
            "--https-address {addr}: the HTTP API over TLS needs a certificate (--tls-cert, \
             --tls-key); nsqd would silently not listen. Give them, or leave the flag out"
        )),
    }
}

/// Why the TLS flags cannot be made into a server configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file of a flag: unreadable, not PEM, or without what the flag needs.
    #[error("{flag} {source}")]
    File {
        flag: &'static str,
        source: PemError,
    },
    #[error("--tls-cert/--tls-key: {0}")]
    Config(rustls::Error),
    #[error("--tls-root-ca-file: {0}")]
    Verifier(String),
}

/// The error of `flag`'s file.
fn file(flag: &'static str) -> impl Fn(PemError) -> TlsError {
    move |source| TlsError::File { flag, source }
}

/// The server configuration for the TLS flags; `None` without a certificate.
pub fn server_config(tls: Option<&TlsSettings>) -> Result<Option<Arc<ServerConfig>>, TlsError> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    let provider = nsq_common::tls::provider();
    let certs = read_certs(&tls.cert).map_err(file("--tls-cert"))?;
    let key = read_private_key(&tls.key).map_err(file("--tls-key"))?;
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
            builder.with_client_cert_verifier(AnyCertificate::new(provider.clone()))
        }
        (Some(ClientAuthPolicy::RequireVerify), Some(ca)) => {
            let roots = read_roots(ca).map_err(file("--tls-root-ca-file"))?;
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

/// The server configuration new TLS connections take: the one made at start-up until a
/// SIGHUP makes another from the files on disk (connections already up keep theirs).
#[derive(Debug)]
pub struct Reloadable(std::sync::RwLock<Arc<ServerConfig>>);

impl Reloadable {
    pub fn new(config: Arc<ServerConfig>) -> Reloadable {
        Reloadable(std::sync::RwLock::new(config))
    }

    /// The configuration in force.
    pub fn get(&self) -> Arc<ServerConfig> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, config: Arc<ServerConfig>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = config;
    }
}

/// Beyond nsqd (which needs a restart to rotate a certificate): on SIGHUP, a thread reads the
/// certificate, key and CA file again and, if they make a configuration, new connections get
/// it; if not, the error is logged and the one in force stays.
pub fn reload_on_sighup(server: Arc<Reloadable>, settings: TlsSettings) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
    std::thread::Builder::new()
        .name("tls-reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                match server_config(Some(&settings)) {
                    Ok(Some(config)) => {
                        server.set(config);
                        tracing::info!(cert = %settings.cert.display(), "TLS: certificate reloaded (SIGHUP)");
                    }
                    Ok(None) => {}
                    Err(e) => tracing::error!(
                        "TLS: certificate not reloaded (SIGHUP), the one in use stays: {e}"
                    ),
                }
            }
        })?;
    Ok(())
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

/// The subject common name of a client's certificate, sent to the auth servers as nsqd sends
/// Go's `Subject.CommonName`: the last CN attribute that is a string, else empty (also for a
/// certificate that does not parse: the handshake already took it, AUTH need not fail).
pub fn subject_common_name(cert: &CertificateDer<'_>) -> String {
    match x509_parser::parse_x509_certificate(cert.as_ref()) {
        Ok((_, parsed)) => parsed
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .last()
            .unwrap_or_default()
            .to_string(),
        Err(e) => {
            tracing::debug!("client certificate's subject not readable: {e}");
            String::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    fn parse(args: &[&str]) -> Result<crate::config::Config, String> {
        let mut v = vec!["broker".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        crate::config::Config::parse_from(v).map_err(|e| e.to_string())
    }

    #[test]
    fn flags_as_nsqd() {
        let c = parse(&[]).unwrap();
        assert!(c.snappy && c.deflate && c.tls.is_none());
        assert_eq!(c.tls_required, TlsRequired::No);
        // Bare booleans, Go's spellings, and -flag=value.
        let c = parse(&["--snappy=false", "-deflate=0"]).unwrap();
        assert!(!c.snappy && !c.deflate);
        assert!(parse(&["--snappy"]).unwrap().snappy);
        assert!(parse(&["--snappy=maybe"]).is_err());
        // Requiring TLS needs a certificate.
        let err = parse(&["--tls-required"]).unwrap_err();
        assert!(err.contains("without TLS key and cert"), "{err}");
        let tls = ["--tls-cert=/c.pem", "--tls-key=/k.pem"];
        let with = |extra: &[&str]| {
            let mut v = tls.to_vec();
            v.extend_from_slice(extra);
            parse(&v)
        };
        assert_eq!(
            with(&["--tls-required"]).unwrap().tls_required,
            TlsRequired::Yes
        );
        assert_eq!(
            with(&["--tls-required=tcp-https"]).unwrap().tls_required,
            TlsRequired::ExceptHttp
        );
        assert_eq!(
            with(&["--tls-required=false"]).unwrap().tls_required,
            TlsRequired::No
        );
        assert!(with(&["--tls-required=sometimes"]).is_err());
        // A client policy implies TLS required.
        let c = with(&[
            "--tls-client-auth-policy=require-verify",
            "--tls-root-ca-file=/ca",
        ])
        .unwrap();
        assert_eq!(c.tls_required, TlsRequired::Yes);
        let s = c.tls.unwrap();
        assert_eq!(s.client_auth, Some(ClientAuthPolicy::RequireVerify));
        assert_eq!(s.root_ca_file, Some(PathBuf::from("/ca")));
        assert!(with(&["--tls-client-auth-policy=maybe"]).is_err());
        assert_eq!(
            with(&["--tls-min-version=tls1.3"])
                .unwrap()
                .tls
                .unwrap()
                .min_version,
            TlsMinVersion::Tls13
        );
        assert!(with(&["--tls-min-version=ssl3.0"]).is_err());
        assert!(parse(&["--tls-cert=/c.pem"]).is_err());
        // Files are read at start-up, not here.
        assert!(with(&[]).unwrap().tls_server.is_none());
        // HTTPS as nsqd: with a certificate, on 0.0.0.0:4152 unless told otherwise.
        let https = |extra: &[&str]| with(extra).unwrap().https_address.map(|a| a.to_string());
        assert_eq!(https(&[]).as_deref(), Some("0.0.0.0:4152"));
        assert_eq!(
            https(&["--https-address=127.0.0.1:0"]).as_deref(),
            Some("127.0.0.1:0")
        );
        assert_eq!(https(&["--https-address="]), None);
        assert!(parse(&[]).unwrap().https_address.is_none());
        assert!(with(&["--https-address=0.0.0.0:4150"]).is_err());
    }

    #[test]
    fn the_subject_common_name_of_a_certificate() {
        let pem = include_bytes!("tcp/testdata/server.pem");
        let cert = CertificateDer::from_pem_slice(pem).expect("a certificate");
        assert_eq!(subject_common_name(&cert), "localhost");
        let ca = CertificateDer::from_pem_slice(include_bytes!("tcp/testdata/ca.pem"))
            .expect("a certificate");
        assert_eq!(subject_common_name(&ca), "broker unit test CA");
        assert_eq!(
            subject_common_name(&CertificateDer::from(vec![0x30, 0x03])),
            ""
        );
    }

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
