//! What the xDS client runs with, and the parsers of the peer's list syntaxes
//! (`CONFIG_GRPC_XDS_NODE_METADATA`, `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`). Data only.

use std::path::PathBuf;
use std::time::Duration;

/// The management server and how to talk to it.
#[derive(Debug, Clone)]
pub struct XdsSettings {
    /// `host:port` (`CONFIG_GRPC_XDS_SERVER_URL`).
    pub server: String,
    /// `CONFIG_GRPC_XDS_NODE_ID` (default `default`).
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`, parsed: string values, a later duplicate wins.
    pub node_metadata: Vec<(String, String)>,
    /// TLS to the server (`CONFIG_GRPC_XDS_SERVER_USE_TLS`); `None`: plaintext HTTP/2.
    pub tls: Option<XdsTls>,
    /// Extra gRPC metadata on the stream, keys lower-cased.
    pub headers: Vec<(String, String)>,
    /// Waits after a broken stream.
    pub backoff: BackoffSettings,
    /// Wait after a failed connection attempt (`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`).
    pub connect_retry: Duration,
    /// Serve before the first snapshot (`FORCE_START_WITHOUT_INITIAL_CONFIG`).
    pub force_start: bool,
    /// Without force start: how long start-up waits for the first snapshot before serving
    /// anyway (`None`: for ever, as the peer).
    pub initial_wait: Option<Duration>,
    /// Largest response accepted (`XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`; gRPC's 4 MiB by default).
    pub max_message_bytes: usize,
}

/// TLS to the management server. Paths only: the files are read at each connection.
#[derive(Debug, Clone, Default)]
pub struct XdsTls {
    /// Client certificate and key (PEM; PKCS#1, PKCS#8 or SEC1 keys), for mTLS.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// CA bundle that signs the server's certificate.
    pub ca: Option<PathBuf>,
    /// The name the server's certificate must carry (and the SNI), instead of the URL's host.
    pub san: Option<String>,
}

/// The peer's reconnect backoff (jpillora/backoff): `XDS_CLIENT_BACKOFF_*`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffSettings {
    pub initial: Duration,
    pub max: Duration,
    /// Growth per attempt (the peer's default 0.5 makes every wait `initial`).
    pub factor: f64,
    pub jitter: bool,
}

impl Default for BackoffSettings {
    /// The peer's defaults: 10 s, 60 s, 0.5, jitter.
    fn default() -> Self {
        BackoffSettings {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        }
    }
}

impl XdsSettings {
    /// The peer's defaults for `server` (plaintext, node `default`).
    pub fn new(server: impl Into<String>) -> XdsSettings {
        XdsSettings {
            server: server.into(),
            node_id: "default".into(),
            node_metadata: Vec::new(),
            tls: None,
            headers: Vec::new(),
            backoff: BackoffSettings::default(),
            connect_retry: Duration::from_secs(3),
            force_start: false,
            initial_wait: None,
            max_message_bytes: 4 * 1024 * 1024,
        }
    }
}

/// `k=v,k2=v2` as the peer reads it: entries without `=` are skipped, the value may hold
/// `=`, nothing is trimmed.
pub fn parse_node_metadata(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `k1:v1,k2:v2` as the peer reads it (each pair exactly one `:`), keys lower-cased as gRPC
/// metadata keys are. An empty text is no header.
pub fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|pair| match pair.split(':').collect::<Vec<_>>()[..] {
            [key, value] => Ok((key.to_ascii_lowercase(), value.to_owned())),
            _ => Err(format!("invalid header {pair:?}: expected name:value (names and values without ':')")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_metadata_is_read_as_the_peer_reads_it() {
        let parsed = parse_node_metadata("a=1,skipped,b=x=y,a=2");
        assert_eq!(parsed, [("a".into(), "1".into()), ("b".into(), "x=y".into()), ("a".into(), "2".into())]);
        assert!(parse_node_metadata("").is_empty());
    }

    #[test]
    fn headers_need_one_colon_each() {
        assert_eq!(
            parse_headers("X-Team:rl,b:2"),
            Ok(vec![("x-team".into(), "rl".into()), ("b".into(), "2".into())])
        );
        assert!(parse_headers("a:b:c").is_err());
        assert!(parse_headers("novalue").is_err());
        assert_eq!(parse_headers(""), Ok(vec![]));
    }
}
