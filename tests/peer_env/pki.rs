//! Certificates made with the `openssl` command line, shaped as Envoy Gateway's (see the
//! crate doc).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `openssl` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command line must be installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and the leaves it signs, shaped as Envoy Gateway's (see the module doc). Its
/// directory is the control plane's side: the CA key, requests, the xDS server's identity.
pub struct Pki {
    dir: tempfile::TempDir,
    serial: u32,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("PKI dir");
        openssl(dir.path(), &["genrsa", "-traditional", "-out", "ca.key", "2048"]);
        openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "ca.key",
                "-days",
                "2",
                "-subj",
                "/CN=envoy-gateway",
                "-out",
                "ca.crt",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pki { dir, serial: 1 }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read a PKI file")
    }

    /// `<name>.crt` and `<name>.key` for `cn` and the DNS names `sans`; no extended key usage.
    pub fn leaf(&mut self, name: &str, cn: &str, sans: &[&str]) {
        self.serial += 1;
        let dns: Vec<String> = sans.iter().map(|san| format!("DNS:{san}")).collect();
        let ext = format!(
            "subjectAltName={}\nkeyUsage=critical,digitalSignature,dataEncipherment,keyEncipherment,nonRepudiation\n",
            dns.join(",")
        );
        let (key, csr, crt, extfile) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
        std::fs::write(self.path(&extfile), ext).expect("extensions file");
        openssl(self.dir.path(), &["genrsa", "-traditional", "-out", &key, "2048"]);
        openssl(self.dir.path(), &["req", "-new", "-key", &key, "-subj", &format!("/CN={cn}"), "-out", &csr]);
        let serial = self.serial.to_string();
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &serial,
                "-days",
                "2",
                "-out",
                &crt,
                "-extfile",
                &extfile,
            ],
        );
        let pem = String::from_utf8(self.read(&key)).expect("PEM");
        assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"), "PKCS#1, as Envoy Gateway writes it");
        let text = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in", &crt])
            .current_dir(self.dir.path())
            .output();
        let text = String::from_utf8_lossy(&text.expect("openssl x509 -text").stdout).into_owned();
        assert!(!text.contains("Extended Key Usage"), "no EKU, as Envoy Gateway's leaves:\n{text}");
    }

    /// A directory holding exactly `ca.crt`, `tls.crt` and `tls.key` (the `envoy-rate-limit`
    /// secret Envoy Gateway mounts at `/certs`), from `ca.crt` and the leaf `leaf`.
    pub fn certs_dir(&self, leaf: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("certs dir");
        for (from, to) in [
            ("ca.crt".to_string(), "ca.crt"),
            (format!("{leaf}.crt"), "tls.crt"),
            (format!("{leaf}.key"), "tls.key"),
        ] {
            std::fs::copy(self.path(&from), dir.path().join(to)).expect("copy a certificate");
        }
        dir
    }
}
