//! Tracing's own metrics: `tollgate_trace_spans_exported_total` and
//! `tollgate_trace_spans_dropped_total{reason}` (`queue_full`: the export queue was full,
//! the collector slow or down; `export_failed`: the collector refused a batch or did not
//! answer in time; `shutdown`: still queued when the server stopped). Exported from startup
//! at 0, tracing on or off, so an alert on drops needs no `absent()`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Why spans never reached the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanDrop {
    QueueFull,
    ExportFailed,
    Shutdown,
}

impl SpanDrop {
    pub const ALL: [SpanDrop; 3] = [SpanDrop::QueueFull, SpanDrop::ExportFailed, SpanDrop::Shutdown];

    pub fn as_str(self) -> &'static str {
        match self {
            SpanDrop::QueueFull => "queue_full",
            SpanDrop::ExportFailed => "export_failed",
            SpanDrop::Shutdown => "shutdown",
        }
    }
}

/// The families of span export.
#[derive(Debug)]
pub struct TraceMetrics {
    exported: Counter,
    dropped: Family<ReasonLabel, Counter>,
}

impl TraceMetrics {
    /// Registers every family in `registry`, each label at 0.
    pub fn register(registry: &mut Registry) -> TraceMetrics {
        let metrics = TraceMetrics { exported: Counter::default(), dropped: Family::default() };
        registry.register(
            "tollgate_trace_spans_exported",
            "Spans the OTLP collector accepted",
            metrics.exported.clone(),
        );
        registry.register(
            "tollgate_trace_spans_dropped",
            "Spans never exported, by reason: queue_full (the export queue was full: the \
             collector is slow or down), export_failed (the collector refused a batch or did not \
             answer in time), shutdown (still queued when the server stopped)",
            metrics.dropped.clone(),
        );
        for reason in SpanDrop::ALL {
            metrics.dropped.get_or_create(&ReasonLabel { reason: reason.as_str() }).inc_by(0);
        }
        metrics
    }

    /// `n` spans the collector accepted.
    pub fn exported(&self, n: u64) {
        self.exported.inc_by(n);
    }

    /// `n` spans lost for `reason`.
    pub fn dropped(&self, reason: SpanDrop, n: u64) {
        self.dropped.get_or_create(&ReasonLabel { reason: reason.as_str() }).inc_by(n);
    }
}
