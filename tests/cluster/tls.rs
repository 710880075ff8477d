//! A Redis Cluster on TLS only that requires client certificates (`tls-auth-clients yes`,
//! the bus on TLS too): the store presents its client certificate to every master, the
//! ones it discovers from the seed included; without one every call fails. The same
//! through Sentinel on TLS only: the certificate goes to the sentinel and to the master.

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use tokio::time::Instant;
use tollgate::algorithm::{Algorithm, Hits, Params};
use tollgate::store::cluster::{ClusterSettings, ClusterStore};
use tollgate::store::redis::{ClientCert, Tls};
use tollgate::store::sentinel::{SentinelSettings, SentinelStore};
use tollgate::store::{Charge, Guarded, RedisSettings, Store};

use crate::cluster_support::{ClusterTls, RedisCluster, MASTERS};
use crate::sentinel_support::{RedisSentinel, MASTER_NAME};

const PARAMS: Params = Params {
    algorithm: Algorithm::FixedWindow,
    limit: 2,
    unit_us: 3_600_000_000,
    burst: 2,
    penalty_us: 0,
    period: None,
};

/// A CA, the nodes' certificate for 127.0.0.1 and a client certificate, as PEM files.
fn certificates(dir: &std::path::Path) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "tollgate cluster test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("CA cert");
    let issuer = Issuer::new(ca, ca_key);
    let leaf = |name: &str, sans: Vec<SanType>| {
        let key = KeyPair::generate().expect("leaf key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
        params.subject_alt_names = sans;
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &issuer).expect("leaf cert");
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf("127.0.0.1", vec![SanType::IpAddress([127, 0, 0, 1].into())]);
    let (client, client_key) = leaf("tollgate", Vec::new());
    for (name, pem) in [
        ("ca.crt", ca_cert.pem()),
        ("server.crt", server),
        ("server.key", server_key),
        ("client.crt", client),
        ("client.key", client_key),
    ] {
        std::fs::write(dir.join(name), pem).expect("write PEM");
    }
}

fn store(cluster: &RedisCluster, dir: &std::path::Path, client: bool) -> Store {
    let client =
        client.then(|| ClientCert { cert_file: dir.join("client.crt"), key_file: dir.join("client.key") });
    let settings = ClusterSettings {
        // The first seed only: the other masters are discovered, and reached with its TLS.
        nodes: vec![format!("rediss://{}", cluster.nodes()[0])],
        tls: Tls::new(Some(dir.join("ca.crt")), client),
        link: RedisSettings::new("redis://127.0.0.1:1/").link(Duration::from_secs(2)),
    };
    Store::Cluster(Guarded::new(ClusterStore::new(&settings).expect("cluster store"), None))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_tls_cluster_is_reached_with_the_client_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    let tls = ClusterTls { dir: dir.path().to_path_buf() };
    let cluster = tokio::task::spawn_blocking(move || RedisCluster::start_tls(tls)).await.expect("cluster");
    let keys: Vec<String> = (0..12).map(|i| format!("tg:tls-test:{i}")).collect();
    let charges: Vec<Charge> =
        keys.iter().map(|key| Charge { key: key.clone(), params: PARAMS, hits: Hits::Consume(1) }).collect();
    let deadline = || Instant::now() + Duration::from_secs(5);

    let presented = store(&cluster, dir.path(), true);
    let results = presented.charge(&charges, deadline()).await;
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed && d.remaining == 1)), "{results:?}");
    for master in 0..MASTERS {
        assert!(cluster.dbsize(master) > 0, "master {master} holds buckets: it was reached over mTLS");
    }

    let refused = store(&cluster, dir.path(), false);
    let results = refused.charge(&charges, deadline()).await;
    assert!(results.iter().all(Result::is_err), "no client certificate, no call: {results:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_sentinel_and_its_master_are_reached_with_the_client_certificate() {
    let dir = tempfile::tempdir().expect("tempdir");
    certificates(dir.path());
    let tls = ClusterTls { dir: dir.path().to_path_buf() };
    let setup = tokio::task::spawn_blocking(move || RedisSentinel::start_tls(tls)).await.expect("sentinel");
    let store = |client: bool| {
        let client = client.then(|| ClientCert {
            cert_file: dir.path().join("client.crt"),
            key_file: dir.path().join("client.key"),
        });
        let settings = SentinelSettings {
            master: MASTER_NAME.into(),
            sentinels: vec![format!("rediss://{}", setup.sentinel_addr())],
            master_url: Some("rediss://127.0.0.1/".into()),
            tls: Tls::new(Some(dir.path().join("ca.crt")), client),
            link: RedisSettings::new("redis://127.0.0.1:1/").link(Duration::from_secs(2)),
            batch: true,
        };
        Store::Sentinel(Guarded::new(SentinelStore::new(&settings).expect("sentinel store"), None))
    };
    let charge = [Charge { key: "tg:tls-sentinel".into(), params: PARAMS, hits: Hits::Consume(1) }];
    let deadline = || Instant::now() + Duration::from_secs(5);
    let results = store(true).charge(&charge, deadline()).await;
    assert!(results.iter().all(|r| r.as_ref().is_ok_and(|d| d.allowed)), "{results:?}");
    let master = setup.data_ports()[0];
    assert_eq!(setup.cli(master, &["EXISTS", "tg:tls-sentinel"]), "1", "the bucket is on the TLS master");
    let results = store(false).charge(&charge, deadline()).await;
    assert!(results.iter().all(Result::is_err), "no client certificate, no call: {results:?}");
}
