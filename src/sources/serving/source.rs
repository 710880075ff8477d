//! Where the serving config comes from: files, or an xDS server and the state of its
//! stream (connected, the version acknowledged, the last rejection). Data only: the xDS
//! client (`crate::sources::xds`) writes it, `/rlconfig`, the status page and `/readyz` read it.

use serde::Serialize;

/// The xDS source's state, as operators see it. Holds no secret: certificate paths at
/// most, never their contents.
#[derive(Debug, Clone, Default, Serialize)]
pub struct XdsState {
    /// `host:port` of the management server.
    pub server: String,
    pub node_id: String,
    /// True while the ADS stream is open.
    pub connected: bool,
    /// True once a first response has been applied (an empty one too).
    pub snapshot_received: bool,
    /// Serving before the first snapshot (`FORCE_START_WITHOUT_INITIAL_CONFIG`).
    pub force_start: bool,
    /// The `version_info` last acknowledged.
    pub acked_version: Option<String>,
    /// The last response some or all of whose resources were rejected.
    pub last_nack: Option<Nack>,
    /// The resources the last response could not apply (empty when it all applied).
    pub rejected: Vec<String>,
    /// Why the stream last broke or failed to open, if it did.
    pub last_stream_error: Option<String>,
}

/// A rejection sent to the server.
#[derive(Debug, Clone, Serialize)]
pub struct Nack {
    /// Unix seconds.
    pub at: u64,
    /// The `version_info` of the rejected response.
    pub version: String,
    pub nonce: String,
    /// The `error_detail` message sent: one `resource: path: problem` per line.
    pub message: String,
}

impl XdsState {
    /// The state as `/rlconfig` text lines.
    pub fn text(&self) -> String {
        let mut out = format!(
            "source: xds {} (node {}), {}\n",
            self.server,
            self.node_id,
            if self.connected { "connected" } else { "not connected" }
        );
        match (&self.acked_version, self.snapshot_received) {
            (Some(version), _) => out.push_str(&format!("acked version: {version}\n")),
            (None, _) => out.push_str("acked version: none (no snapshot yet: nothing is limited)\n"),
        }
        if !self.rejected.is_empty() {
            out.push_str(&format!("rejected resources: {}\n", self.rejected.join(", ")));
        }
        if let Some(nack) = &self.last_nack {
            out.push_str(&format!("last nack: version {} at {}:\n", nack.version, nack.at));
            for line in nack.message.lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }
}
