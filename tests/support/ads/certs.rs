//! Certificates made for one test: a CA, a server leaf for the name `xds.test` (the client
//! dials 127.0.0.1 and verifies that name through the SAN override), and a client leaf for
//! mTLS, all written as PEM files into a temporary directory.

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

/// The files and the server's PEM identity.
pub struct Certs {
    pub dir: tempfile::TempDir,
    pub server: super::server::ServerTls,
}

impl Certs {
    pub fn new() -> Certs {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "tollgate test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("CA cert");
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |name: &str, usage: ExtendedKeyUsagePurpose| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(vec![name.to_owned()]).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, name);
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).expect("leaf cert");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf("xds.test", ExtendedKeyUsagePurpose::ServerAuth);
        let (client_cert, client_key) = leaf("envoy-ratelimit", ExtendedKeyUsagePurpose::ClientAuth);
        let dir = tempfile::tempdir().expect("cert dir");
        for (name, pem) in [("ca.crt", ca_cert.pem()), ("tls.crt", client_cert), ("tls.key", client_key)] {
            std::fs::write(dir.path().join(name), pem).expect("write PEM");
        }
        let server = super::server::ServerTls {
            cert: server_cert.into_bytes(),
            key: server_key.into_bytes(),
            client_ca: ca_cert.pem().into_bytes(),
        };
        Certs { dir, server }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}
