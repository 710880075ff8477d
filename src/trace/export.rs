//! Span export off the request path: a span that ends is put on a bounded queue without
//! waiting (`Processor::on_end`, a `try_send`); one task on the runtime takes the queue in
//! batches and sends each to the collector, one batch at a time, each within
//! `export_timeout`. A slow or absent collector fills the queue, and spans past its size are
//! dropped and counted (`tollgate_trace_spans_dropped_total{reason="queue_full"}`); a batch
//! the collector refuses or does not answer in time is counted as `export_failed`. Nothing
//! a request does waits for the collector.
//!
//! Ours rather than the SDK's batch processor: it runs on the server's runtime (the gRPC
//! exporter needs one), and every span it loses is counted in our metrics.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::metrics::trace::SpanDrop;
use crate::metrics::Metrics;

/// The queue and batch shapes (the standard `OTEL_BSP_*` variables).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSettings {
    /// Spans waiting for export, at most (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048).
    pub queue_size: usize,
    /// Spans per export, at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512).
    pub batch_size: usize,
    /// Longest a span waits for its batch to fill (`OTEL_BSP_SCHEDULE_DELAY`, 5 s).
    pub schedule_delay: Duration,
    /// Longest one export may take (`OTEL_BSP_EXPORT_TIMEOUT`, 30 s).
    pub export_timeout: Duration,
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            queue_size: 2048,
            batch_size: 512,
            schedule_delay: Duration::from_millis(5000),
            export_timeout: Duration::from_millis(30_000),
        }
    }
}

/// The tracer provider's span processor: queues ended spans for the export task.
#[derive(Debug)]
pub struct Processor {
    queue: mpsc::Sender<SpanData>,
    metrics: Arc<Metrics>,
}

impl SpanProcessor for Processor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        match self.queue.try_send(span) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.metrics.trace().dropped(SpanDrop::QueueFull, 1),
            Err(mpsc::error::TrySendError::Closed(_)) => self.metrics.trace().dropped(SpanDrop::Shutdown, 1),
        }
    }

    /// Nothing to do synchronously: the export task flushes on its schedule and at stop.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Stops the export task: what is queued is sent, within a bound, and the rest counted.
#[derive(Debug)]
pub struct Exporting {
    stop: watch::Sender<bool>,
    /// To count what an export cut short by `stop`'s bound left queued.
    queue: mpsc::WeakSender<SpanData>,
    metrics: Arc<Metrics>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Exporting {
    /// Sends what is queued within `within`; spans left after it are dropped as `shutdown`.
    pub async fn stop(&self, within: Duration) {
        let _ = self.stop.send(true);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut task) = task {
            if tokio::time::timeout(within, &mut task).await.is_err() {
                task.abort();
                if let Some(queue) = self.queue.upgrade() {
                    let left = queue.max_capacity() - queue.capacity();
                    self.metrics.trace().dropped(SpanDrop::Shutdown, left as u64);
                }
            }
        }
    }
}

/// The processor for the provider, and the running export task.
pub fn start<E>(exporter: E, settings: BatchSettings, metrics: Arc<Metrics>) -> (Processor, Exporting)
where
    E: SpanExporter + 'static,
{
    let (queue, spans) = mpsc::channel(settings.queue_size.max(1));
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(export(exporter, spans, settings, metrics.clone(), stopped));
    let exporting = Exporting {
        stop,
        queue: queue.downgrade(),
        metrics: metrics.clone(),
        task: std::sync::Mutex::new(Some(task)),
    };
    (Processor { queue, metrics }, exporting)
}

async fn export<E: SpanExporter>(
    exporter: E,
    mut spans: mpsc::Receiver<SpanData>,
    settings: BatchSettings,
    metrics: Arc<Metrics>,
    mut stopped: watch::Receiver<bool>,
) {
    let batch_size = settings.batch_size.max(1);
    let mut failing = false;
    loop {
        let first = tokio::select! {
            span = spans.recv() => span,
            _ = stopped.wait_for(|stop| *stop) => None,
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        let due = Instant::now() + settings.schedule_delay;
        while batch.len() < batch_size {
            tokio::select! {
                span = spans.recv() => match span {
                    Some(span) => batch.push(span),
                    None => break,
                },
                _ = tokio::time::sleep_until(due) => break,
                _ = stopped.wait_for(|stop| *stop) => break,
            }
        }
        send(&exporter, batch, settings.export_timeout, &metrics, &mut failing).await;
        if *stopped.borrow() {
            break;
        }
    }
    // Stopping: no span is queued from now on; what is queued goes out in full batches.
    spans.close();
    let mut batch = Vec::new();
    while let Some(span) = spans.recv().await {
        batch.push(span);
        if batch.len() == batch_size {
            send(&exporter, std::mem::take(&mut batch), settings.export_timeout, &metrics, &mut failing)
                .await;
        }
    }
    if !batch.is_empty() {
        send(&exporter, batch, settings.export_timeout, &metrics, &mut failing).await;
    }
}

/// One export, counted: exported, or dropped as `export_failed`. The first failure after
/// a success is logged as a warning, the recovery once (not every batch).
async fn send<E: SpanExporter>(
    exporter: &E,
    batch: Vec<SpanData>,
    timeout: Duration,
    metrics: &Metrics,
    failing: &mut bool,
) {
    let n = batch.len() as u64;
    let error = match tokio::time::timeout(timeout, exporter.export(batch)).await {
        Ok(Ok(())) => {
            metrics.trace().exported(n);
            if std::mem::take(failing) {
                tracing::info!("span export recovered");
            }
            return;
        }
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!("no answer within {timeout:?}"),
    };
    metrics.trace().dropped(SpanDrop::ExportFailed, n);
    if !std::mem::replace(failing, true) {
        tracing::warn!(%error, spans = n, "span export failed: spans are dropped until the collector answers");
    }
}
