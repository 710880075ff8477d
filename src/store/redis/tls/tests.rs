//! Client certificates read and checked: PEM, the key matching, errors naming the file and
//! never its contents; the subject and expiry as shown.

use rcgen::{CertificateParams, DnType, KeyPair};

use super::*;

/// A self-signed certificate for `name` and its key, as PEM.
fn pair(name: &str) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec![name.to_owned()]).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("cert");
    (cert.pem(), key.serialize_pem())
}

fn files(dir: &Path, cert: &str, key: &str) -> ClientCert {
    std::fs::write(dir.join("tls.crt"), cert).expect("write cert");
    std::fs::write(dir.join("tls.key"), key).expect("write key");
    ClientCert { cert_file: dir.join("tls.crt"), key_file: dir.join("tls.key") }
}

#[test]
fn a_matching_pair_loads_with_its_subject_and_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = pair("tollgate-client");
    let loaded = files(dir.path(), &cert, &key).load().expect("loads");
    assert_eq!(loaded.info.subject, "CN=tollgate-client");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    assert!(loaded.info.not_after > now as i64, "rcgen's default validity runs far past now");
    assert_eq!(loaded.cert_pem, cert.as_bytes());
}

#[test]
fn a_key_of_another_certificate_is_refused_without_showing_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, _) = pair("a");
    let (_, other_key) = pair("b");
    let error = files(dir.path(), &cert, &other_key).load().err().expect("refused");
    assert!(error.contains("does not go with the certificate") && error.contains("tls.key"), "{error}");
    let secret = other_key.lines().nth(1).expect("a line of key material");
    assert!(!error.contains(secret), "{error}");
}

#[test]
fn missing_files_and_what_is_not_pem_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = pair("a");
    let missing =
        ClientCert { cert_file: dir.path().join("nope.crt"), key_file: dir.path().join("nope.key") };
    let error = missing.load().err().expect("missing");
    assert!(error.contains("nope.crt"), "{error}");
    let error = files(dir.path(), "not a certificate", &key).load().err().expect("no certificate");
    assert!(error.contains("tls.crt") && error.contains("no certificate"), "{error}");
    let error = files(dir.path(), &cert, "not a key").load().err().expect("no key");
    assert!(error.contains("tls.key") && error.contains("no PEM private key"), "{error}");
}

#[test]
fn every_read_records_what_was_read_and_a_rotation_is_seen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = pair("first");
    let client = files(dir.path(), &cert, &key);
    let tls = Tls::new(None, Some(client.clone()));
    assert_eq!(tls.client_cert(), None, "nothing read yet");
    let certs = tls.certificates().expect("reads");
    assert!(certs.client_tls.is_some() && certs.root_cert.is_none());
    assert_eq!(tls.client_cert().map(|c| c.subject), Some("CN=first".into()));
    // Rotated in place: the next read presents the new one.
    let (cert, key) = pair("second");
    files(dir.path(), &cert, &key);
    tls.certificates().expect("reads again");
    assert_eq!(tls.clone().client_cert().map(|c| c.subject), Some("CN=second".into()), "clones share it");
    assert!(!format!("{tls:?}").contains("PRIVATE"));
}
