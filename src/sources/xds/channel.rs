//! Dialling the management server: plaintext HTTP/2, TLS or mTLS. The certificate files are
//! read at each connection (a rotated certificate is picked up on the next reconnect); their
//! contents never reach a log or an error, only their paths.

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::settings::{XdsSettings, XdsTls};

/// Longest a connection attempt (TCP and TLS handshakes) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected channel to the server, or why not (as text for logs and `/rlconfig`).
pub async fn connect(settings: &XdsSettings) -> Result<Channel, String> {
    let scheme = if settings.tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", settings.server))
        .map_err(|e| format!("invalid xDS server address {:?}: {e}", settings.server))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    if let Some(tls) = &settings.tls {
        endpoint =
            endpoint.tls_config(tls_config(tls, &settings.server)?).map_err(|e| format!("xDS TLS: {e}"))?;
    }
    endpoint.connect().await.map_err(|e| chain(&e))
}

/// Checks that the TLS files can be read, at start-up (a typo is a start-up error, not an
/// endless reconnect loop).
pub fn check_files(tls: &XdsTls) -> Result<(), String> {
    tls_config(tls, "localhost").map(|_| ())
}

fn tls_config(tls: &XdsTls, server: &str) -> Result<ClientTlsConfig, String> {
    let read = |path: &std::path::PathBuf| {
        std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new().domain_name(match &tls.san {
        Some(san) => san.clone(),
        None => host(server).to_owned(),
    });
    match &tls.ca {
        Some(ca) => config = config.ca_certificate(Certificate::from_pem(read(ca)?)),
        None => {
            return Err("xDS over TLS needs a CA bundle (CONFIG_GRPC_XDS_SERVER_TLS_CACERT or --xds-ca): \
                        Tollgate carries no system root store"
                .into())
        }
    }
    match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => config = config.identity(Identity::from_pem(read(cert)?, read(key)?)),
        (None, None) => {}
        _ => return Err("xDS mTLS needs both the client certificate and its key".into()),
    }
    Ok(config)
}

/// The host of `host:port` (`[v6]:port` too), for certificate verification and SNI.
fn host(server: &str) -> &str {
    let host = server.rsplit_once(':').map_or(server, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// An error with its causes: tonic's own message is often just "transport error".
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
