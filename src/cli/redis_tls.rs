//! `--redis-client-cert-file` / `--redis-client-key-file` (and the peer's
//! `REDIS_TLS_CLIENT_CERT` / `REDIS_TLS_CLIENT_KEY`, mapped onto them) checked at startup:
//! both or neither, readable PEM, the key matching the certificate, a Redis store, and TLS to
//! every server the buckets live on. Each error names the flag, its variable and the peer's.

use std::path::PathBuf;

use crate::app::{RedisTopology, StoreKind};
use crate::store::redis::{node_url, redact_url, ClientCert};

const CERT: &str =
    "--redis-client-cert-file (TOLLGATE_REDIS_CLIENT_CERT_FILE; the peer's REDIS_TLS_CLIENT_CERT)";
const KEY: &str = "--redis-client-key-file (TOLLGATE_REDIS_CLIENT_KEY_FILE; the peer's REDIS_TLS_CLIENT_KEY)";

/// The client certificate the flags give, checked (`None`: neither flag).
pub fn client_cert(
    cert: Option<&PathBuf>,
    key: Option<&PathBuf>,
    store: StoreKind,
    url: &str,
    topology: &RedisTopology,
) -> Result<Option<ClientCert>, String> {
    let client = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => ClientCert { cert_file: cert.clone(), key_file: key.clone() },
        (Some(_), None) => return Err(format!("{CERT} is given without {KEY}: give both")),
        (None, Some(_)) => return Err(format!("{KEY} is given without {CERT}: give both")),
    };
    if store != StoreKind::Redis {
        return Err(format!("{CERT} is given, but the store is memory: there is no Redis to present it to"));
    }
    client.load().map_err(|e| format!("{CERT} / {KEY}: {e}"))?;
    // The servers the buckets live on: the data URL, or every seed (discovered nodes take
    // the first seed's TLS mode). Sentinels may run without TLS beside a TLS master.
    let servers: Vec<String> = match topology {
        RedisTopology::Cluster { nodes } => nodes.iter().map(|n| node_url(n)).collect(),
        RedisTopology::Single | RedisTopology::Sentinel { .. } => vec![url.to_string()],
    };
    if let Some(plain) = servers.iter().find(|u| !u.starts_with("rediss://")) {
        return Err(format!(
            "{CERT} is given, but {} is not a TLS URL (rediss://): a client certificate needs TLS",
            redact_url(plain)
        ));
    }
    Ok(Some(client))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A certificate and its key written into `dir` (`a.crt`, `a.key`), and another key.
    fn files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert =
            rcgen::CertificateParams::new(vec!["a".into()]).expect("params").self_signed(&key).expect("cert");
        let other = rcgen::KeyPair::generate().expect("key");
        let paths = (dir.join("a.crt"), dir.join("a.key"), dir.join("other.key"));
        std::fs::write(&paths.0, cert.pem()).expect("write");
        std::fs::write(&paths.1, key.serialize_pem()).expect("write");
        std::fs::write(&paths.2, other.serialize_pem()).expect("write");
        paths
    }

    #[test]
    fn each_misuse_is_refused_at_startup_naming_the_flag_and_the_peers_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key, other) = files(dir.path());
        let single = RedisTopology::Single;
        let tls = "rediss://h:6380/";
        let check = |c: Option<&PathBuf>, k: Option<&PathBuf>, store, url: &str, topology: &RedisTopology| {
            client_cert(c, k, store, url, topology)
        };
        assert_eq!(check(None, None, StoreKind::Redis, "redis://h", &single), Ok(None));
        let ok = check(Some(&cert), Some(&key), StoreKind::Redis, tls, &single).expect("valid");
        assert_eq!(ok, Some(ClientCert { cert_file: cert.clone(), key_file: key.clone() }));
        let refused = [
            (check(Some(&cert), None, StoreKind::Redis, tls, &single), "without --redis-client-key-file"),
            (check(None, Some(&key), StoreKind::Redis, tls, &single), "without --redis-client-cert-file"),
            (check(Some(&cert), Some(&key), StoreKind::Memory, tls, &single), "the store is memory"),
            (
                check(Some(&cert), Some(&key), StoreKind::Redis, "redis://:pw@h:6379/", &single),
                "not a TLS URL",
            ),
            (
                check(Some(&cert), Some(&other), StoreKind::Redis, tls, &single),
                "does not go with the certificate",
            ),
            (check(Some(&key), Some(&key), StoreKind::Redis, tls, &single), "holds no certificate"),
        ];
        for (result, expected) in refused {
            let error = result.expect_err(expected);
            assert!(error.contains(expected), "{expected}: {error}");
            assert!(error.contains("REDIS_TLS_CLIENT_"), "the peer's variable is named: {error}");
            assert!(!error.contains(":pw@"), "no password: {error}");
        }
        // A cluster: every seed over TLS (discovered nodes take the first seed's mode).
        let cluster = RedisTopology::Cluster { nodes: vec!["rediss://a:7000".into(), "b:7001".into()] };
        let error = check(Some(&cert), Some(&key), StoreKind::Redis, "", &cluster).expect_err("a plain seed");
        assert!(error.contains("redis://b:7001"), "{error}");
        // Sentinels may be plain beside a TLS master (--redis-url).
        let sentinel = RedisTopology::Sentinel { master: "m".into(), sentinels: vec!["s:26379".into()] };
        assert!(check(Some(&cert), Some(&key), StoreKind::Redis, tls, &sentinel).is_ok());
    }
}
