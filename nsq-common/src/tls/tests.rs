//! The shared TLS pieces against certificates made here (`test_harness::certs`, rcgen): PEM files read or refused
//! naming the file, and [`AnyCertificate`] on both sides of an in-memory handshake.

use super::*;
use rustls::{ClientConfig, ClientConnection, ConnectionCommon, ServerConfig, ServerConnection};
use test_harness::certs::self_signed;

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("nsq-common-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn file(&self, name: &str, contents: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, contents).expect("write");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn pem_files_are_read_or_refused_naming_the_file() {
    let dir = Scratch::new("pem");
    let (cert, key) = self_signed("a.example");
    let cert_path = dir.file("cert.pem", &format!("{cert}{cert}"));
    let key_path = dir.file("key.pem", &key);
    let junk = dir.file("junk.pem", "not PEM at all\n");
    let bad = dir.file(
        "bad.pem",
        "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    );

    assert_eq!(read_certs(&cert_path).expect("certs").len(), 2);
    assert!(read_private_key(&key_path).is_ok());
    assert!(read_roots(&cert_path).is_ok());

    let missing = Path::new("/nonexistent/ca.pem");
    for e in [
        read_certs(missing).map(|_| ()).unwrap_err(),
        read_private_key(missing).map(|_| ()).unwrap_err(),
        read_roots(missing).map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(e, PemError::Read { .. }), "{e:?}");
        assert_eq!(e.path(), missing);
        assert!(
            e.to_string()
                .starts_with("/nonexistent/ca.pem: cannot read: "),
            "{e}"
        );
    }
    let e = read_certs(&junk).unwrap_err();
    assert!(
        matches!(
            e,
            PemError::Missing {
                what: "CERTIFICATE",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .ends_with("junk.pem: no CERTIFICATE in the file"),
        "{e}"
    );
    let e = read_private_key(&cert_path).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("cert.pem: no private key in the file"),
        "{e}"
    );
    let e = read_roots(&junk).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("no usable CA certificate in the file"),
        "{e}"
    );
    let e = read_certs(&bad).unwrap_err();
    assert!(matches!(e, PemError::Parse { .. }), "{e:?}");
    // A PEM certificate that is not X.509 is not a usable root.
    let not_x509 = dir.file(
        "notx509.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let e = read_roots(&not_x509).unwrap_err();
    assert!(matches!(e, PemError::Missing { .. }), "{e:?}");
}

/// Hands what `from` has to send to `to`, which processes it.
fn pass<F, T>(from: &mut ConnectionCommon<F>, to: &mut ConnectionCommon<T>) -> Result<(), String> {
    let mut wire = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut wire).map_err(|e| e.to_string())?;
    }
    let mut at = &wire[..];
    while !at.is_empty() {
        to.read_tls(&mut at).map_err(|e| e.to_string())?;
    }
    to.process_new_packets().map_err(|e| e.to_string())?;
    Ok(())
}

/// Runs the handshake between `client` and `server` in memory; the first error either side
/// hits, if any.
fn handshake(client: &mut ClientConnection, server: &mut ServerConnection) -> Result<(), String> {
    for _ in 0..20 {
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
        pass(client, server).map_err(|e| format!("server: {e}"))?;
        pass(server, client).map_err(|e| format!("client: {e}"))?;
    }
    Err("handshake did not finish".into())
}

fn server_config(dir: &Scratch, name: &str) -> Arc<ServerConfig> {
    let (cert, key) = self_signed(name);
    let certs = read_certs(&dir.file("server.pem", &cert)).expect("certs");
    let key = read_private_key(&dir.file("server.key", &key)).expect("key");
    Arc::new(
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(AnyCertificate::new(provider()))
            .with_single_cert(certs, key)
            .expect("server config"),
    )
}

fn client_config(dir: &Scratch, with_cert: bool) -> Arc<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(AnyCertificate::new(provider()));
    Arc::new(if with_cert {
        let (cert, key) = self_signed("client.example");
        let certs = read_certs(&dir.file("client.pem", &cert)).expect("certs");
        let key = read_private_key(&dir.file("client.key", &key)).expect("key");
        builder
            .with_client_auth_cert(certs, key)
            .expect("client cert")
    } else {
        builder.with_no_client_auth()
    })
}

#[test]
fn any_certificate_on_both_sides_still_requires_one_from_the_client() {
    let dir = Scratch::new("handshake");
    let server_config = server_config(&dir, "server.example");
    // Self-signed everywhere, and a name the server's certificate does not carry.
    let name = ServerName::try_from("elsewhere.example").expect("name");
    let mut client =
        ClientConnection::new(client_config(&dir, true), name.clone()).expect("client");
    let mut server = ServerConnection::new(server_config.clone()).expect("server");
    handshake(&mut client, &mut server).expect("handshake");
    let presented = server
        .peer_certificates()
        .expect("the client's certificate");
    assert_eq!(presented.len(), 1);

    // `require`: a client without a certificate is refused.
    let mut client = ClientConnection::new(client_config(&dir, false), name).expect("client");
    let mut server = ServerConnection::new(server_config).expect("server");
    let e = handshake(&mut client, &mut server).expect_err("no client certificate");
    assert!(e.starts_with("server: "), "{e}");
}
