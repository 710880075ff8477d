//! Where the config comes from, and the xDS stream's state:
//! `tollgate_config_source_info{source,server}`, `tollgate_xds_connected`,
//! `tollgate_xds_waiting_for_first_snapshot` (1: no snapshot yet, nothing is limited),
//! `tollgate_xds_acked_version_info{version}`, `tollgate_xds_responses_total{result}`,
//! `tollgate_xds_rejected_resources{resource}` and `tollgate_xds_stream_breaks_total`.
//! Bounded labels: one source, one version, and the names of the resources the server sent.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

/// How one xDS response was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdsResult {
    /// Every resource applied.
    Ack,
    /// Some resources rejected: the good ones applied, the request carries the new version
    /// and an `error_detail` naming the rejected ones.
    Partial,
    /// Nothing applied: a resource did not decode or was of another type, the compile step
    /// failed, or the response was of another type. The version acknowledged stays the
    /// previous one.
    Nack,
}

impl XdsResult {
    fn as_str(self) -> &'static str {
        match self {
            XdsResult::Ack => "ack",
            XdsResult::Partial => "partial",
            XdsResult::Nack => "nack",
        }
    }
}

/// The families.
#[derive(Debug)]
pub struct XdsMetrics {
    source: Family<SourceLabels, Gauge>,
    connected: Gauge,
    waiting: Gauge,
    acked: Family<VersionLabel, Gauge>,
    responses: Family<ResultLabel, Counter>,
    rejected: Family<ResourceLabel, Gauge>,
    breaks: Counter,
}

impl XdsMetrics {
    /// Registers the families in `registry` (the xDS ones are exported only with that source).
    pub fn register(registry: &mut Registry) -> XdsMetrics {
        let metrics = XdsMetrics {
            source: Family::default(),
            connected: Gauge::default(),
            waiting: Gauge::default(),
            acked: Family::default(),
            responses: Family::default(),
            rejected: Family::default(),
            breaks: Counter::default(),
        };
        registry.register(
            "tollgate_config_source_info",
            "Where the policies come from: source=files (server=\"\") or source=xds (server=host:port)",
            metrics.source.clone(),
        );
        registry.register(
            "tollgate_xds_connected",
            "1 while the xDS stream is open",
            metrics.connected.clone(),
        );
        registry.register(
            "tollgate_xds_waiting_for_first_snapshot",
            "1 until the first xDS snapshot arrives: until then no domain is configured and nothing is limited",
            metrics.waiting.clone(),
        );
        registry.register(
            "tollgate_xds_acked_version_info",
            "The xDS version_info last acknowledged (the snapshot serving, less rejected resources)",
            metrics.acked.clone(),
        );
        registry.register(
            "tollgate_xds_responses",
            "xDS responses by answer: ack, partial (some resources rejected, the rest applied), nack",
            metrics.responses.clone(),
        );
        registry.register(
            "tollgate_xds_rejected_resources",
            "1 per RateLimitConfig resource the last response could not apply (its last good version, if any, serves)",
            metrics.rejected.clone(),
        );
        registry.register(
            "tollgate_xds_stream_breaks",
            "xDS streams that failed to open or broke (each is followed by a reconnect)",
            metrics.breaks.clone(),
        );
        metrics
    }

    /// The config comes from files.
    pub fn files(&self) {
        self.source.get_or_create(&SourceLabels { source: "files", server: String::new() }).set(1);
    }

    /// The config comes from the xDS server at `server`; no snapshot yet.
    pub fn xds(&self, server: &str) {
        self.source.get_or_create(&SourceLabels { source: "xds", server: server.to_owned() }).set(1);
        self.waiting.set(1);
        for result in [XdsResult::Ack, XdsResult::Partial, XdsResult::Nack] {
            self.responses.get_or_create(&ResultLabel { result: result.as_str() }).inc_by(0);
        }
    }

    /// The stream is open (or not).
    pub fn connected(&self, open: bool) {
        self.connected.set(i64::from(open));
        if !open {
            self.breaks.inc();
        }
    }

    /// One response answered: `version` acknowledged (unless `Nack`), `rejected` its bad
    /// resources.
    pub fn answered(&self, result: XdsResult, version: &str, rejected: &[String]) {
        self.responses.get_or_create(&ResultLabel { result: result.as_str() }).inc();
        if result == XdsResult::Nack {
            return;
        }
        self.waiting.set(0);
        self.acked.clear();
        self.acked.get_or_create(&VersionLabel { version: version.to_owned() }).set(1);
        self.rejected.clear();
        for name in rejected {
            self.rejected.get_or_create(&ResourceLabel { resource: name.clone() }).set(1);
        }
    }
}
