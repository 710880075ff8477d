//! What Tollgate trusts and presents on a TLS connection to Redis: the CA that verifies a
//! `rediss://` server (`--redis-ca-file`) and the client certificate it presents
//! (`--redis-client-cert-file`, `--redis-client-key-file`; the peer's
//! `REDIS_TLS_CLIENT_CERT` / `REDIS_TLS_CLIENT_KEY`).
//!
//! The files are read again for every new connection, so a certificate rotated in place (a
//! Kubernetes secret is updated in its volume) is presented by the next connection without a
//! restart; a read that fails then keeps the certificate read before it (a secret is swapped
//! file by file) and says so in the log. A key's contents never leave this file: errors name
//! the file, never a byte of it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The TLS files of every Redis connection (all optional).
#[derive(Clone, Default)]
pub struct Tls {
    /// PEM CA bundle that verifies a `rediss://` server (default: the system roots).
    pub ca_file: Option<PathBuf>,
    /// The client certificate presented to every TLS server.
    pub client: Option<ClientCert>,
    /// What was last read of the client certificate (for `/rlconfig` and the metric).
    seen: Arc<Mutex<Option<CertInfo>>>,
}

impl PartialEq for Tls {
    fn eq(&self, other: &Tls) -> bool {
        self.ca_file == other.ca_file && self.client == other.client
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("ca_file", &self.ca_file).field("client", &self.client).finish()
    }
}

/// A client certificate and its key, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

/// What `/rlconfig` and the metrics show of a client certificate: never the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// The subject's distinguished name (`CN=tollgate,O=…`).
    pub subject: String,
    /// When it expires, in seconds since the Unix epoch.
    pub not_after: i64,
    /// The same instant as the certificate writes it (`Dec 31 23:59:59 2027 +00:00`).
    pub expires: String,
}

/// A client certificate as read: both PEM files, checked.
pub struct Loaded {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub info: CertInfo,
}

impl ClientCert {
    /// Reads both files and checks them: PEM, a certificate first, a private key, and the
    /// key matching the certificate. Errors name the file and never show its contents.
    pub fn load(&self) -> Result<Loaded, String> {
        let read = |path: &Path, what: &str| {
            std::fs::read(path).map_err(|e| format!("the Redis client {what} file {}: {e}", path.display()))
        };
        let cert_pem = read(&self.cert_file, "certificate")?;
        let key_pem = read(&self.key_file, "key")?;
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(&cert_pem).collect::<Result<_, _>>().map_err(|e| {
                format!("the Redis client certificate file {}: not PEM ({e})", self.cert_file.display())
            })?;
        let Some(first) = chain.first() else {
            return Err(format!(
                "the Redis client certificate file {} holds no certificate",
                self.cert_file.display()
            ));
        };
        let (info, spki) = info(first).map_err(|e| {
            format!(
                "the Redis client certificate file {}: not an X.509 certificate ({e})",
                self.cert_file.display()
            )
        })?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| {
            format!("the Redis client key file {} holds no PEM private key", self.key_file.display())
        })?;
        let provider = rustls::crypto::ring::default_provider();
        let signing = provider.key_provider.load_private_key(key).map_err(|e| {
            format!("the Redis client key file {}: not a usable private key ({e})", self.key_file.display())
        })?;
        // The key's public half against the certificate's (compared here rather than by
        // rustls, whose parser refuses the X.509 v1 certificates `openssl x509 -req` makes).
        if signing.public_key().is_some_and(|public| public.as_ref() != spki.as_slice()) {
            return Err(format!(
                "the Redis client key file {} does not go with the certificate in {}",
                self.key_file.display(),
                self.cert_file.display()
            ));
        }
        Ok(Loaded { cert_pem, key_pem, info })
    }
}

/// What is shown of a certificate, and its public key (DER `SubjectPublicKeyInfo`).
fn info(cert: &CertificateDer<'_>) -> Result<(CertInfo, Vec<u8>), String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| e.to_string())?;
    let not_after = parsed.validity().not_after;
    let info = CertInfo {
        subject: parsed.subject().to_string(),
        not_after: not_after.timestamp(),
        expires: not_after.to_string(),
    };
    Ok((info, parsed.tbs_certificate.subject_pki.raw.to_vec()))
}

impl Tls {
    /// The TLS files, none read yet.
    pub fn new(ca_file: Option<PathBuf>, client: Option<ClientCert>) -> Tls {
        Tls { ca_file, client, seen: Arc::default() }
    }

    /// Whether anything is to be read (else a URL is used as it is, with the system roots).
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.client.is_some()
    }

    /// The certificates redis-rs builds a TLS connection from, read now.
    pub fn certificates(&self) -> Result<redis::TlsCertificates, String> {
        let root_cert = match &self.ca_file {
            Some(path) => Some(std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?),
            None => None,
        };
        let client_tls = match &self.client {
            Some(client) => {
                let loaded = client.load()?;
                *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(loaded.info);
                Some(redis::ClientTlsConfig { client_cert: loaded.cert_pem, client_key: loaded.key_pem })
            }
            None => None,
        };
        Ok(redis::TlsCertificates { client_tls, root_cert })
    }

    /// The client certificate as last read (`None`: none configured, or not read yet).
    pub fn client_cert(&self) -> Option<CertInfo> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests;
