//! Span export off the request path: a span that ends is put on a bounded queue without
//! waiting (`Processor::on_end`: a short lock, a push); one task on the runtime takes the
//! queue in batches and sends each to the collector, one batch at a time, each within
//! `export_timeout`. A slow or absent collector fills the queue, and spans past its size are
//! dropped and counted (`tollgate_trace_spans_dropped_total{reason="queue_full"}`); a batch
//! the collector refuses or does not answer in time is counted as `export_failed`. Nothing
//! a request does waits for the collector.
//!
//! The task wakes every `schedule_delay`, or when a full batch is queued — not for each
//! span: waking an idle worker thread per sampled span cost more CPU than the span itself
//! at low sampling ratios (docs/performance.md, "Tracing").
//!
//! Ours rather than the SDK's batch processor: it runs on the server's runtime (the gRPC
//! exporter needs one), and every span it loses is counted in our metrics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use tokio::sync::{watch, Notify};

use crate::telemetry::metrics::trace::SpanDrop;
use crate::telemetry::metrics::Metrics;

/// The queue and batch shapes (the standard `OTEL_BSP_*` variables).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSettings {
    /// Spans waiting for export, at most (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048).
    pub queue_size: usize,
    /// Spans per export, at most (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512).
    pub batch_size: usize,
    /// Longest a span waits for its export (`OTEL_BSP_SCHEDULE_DELAY`, 5 s).
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

/// The spans waiting for export, shared by the processor and the export task.
#[derive(Debug)]
struct Queue {
    spans: Mutex<Queued>,
    /// Told when a full batch is queued.
    full: Notify,
    queue_size: usize,
    batch_size: usize,
}

#[derive(Debug, Default)]
struct Queued {
    spans: Vec<SpanData>,
    /// Stopped: spans ending from now on are dropped as `shutdown`.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queued> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to a batch of the oldest spans.
    fn take_batch(&self) -> Vec<SpanData> {
        let mut queued = self.lock();
        let n = queued.spans.len().min(self.batch_size);
        queued.spans.drain(..n).collect()
    }
}

/// The tracer provider's span processor: queues ended spans for the export task.
#[derive(Debug)]
pub struct Processor {
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
}

impl SpanProcessor for Processor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let (dropped, full) = {
            let mut queued = self.queue.lock();
            if queued.closed {
                (Some(SpanDrop::Shutdown), false)
            } else if queued.spans.len() >= self.queue.queue_size {
                (Some(SpanDrop::QueueFull), false)
            } else {
                queued.spans.push(span);
                (None, queued.spans.len() == self.queue.batch_size)
            }
        };
        if let Some(reason) = dropped {
            self.metrics.trace().dropped(reason, 1);
        }
        if full {
            self.queue.full.notify_one();
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
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Exporting {
    /// Sends what is queued within `within`; spans left after it are dropped as `shutdown`.
    pub async fn stop(&self, within: Duration) {
        let _ = self.stop.send(true);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut task) = task {
            if tokio::time::timeout(within, &mut task).await.is_err() {
                task.abort();
            }
        }
        let left = {
            let mut queued = self.queue.lock();
            queued.closed = true;
            std::mem::take(&mut queued.spans).len()
        };
        self.metrics.trace().dropped(SpanDrop::Shutdown, left as u64);
    }
}

/// The processor for the provider, and the running export task.
pub fn start<E>(exporter: E, settings: BatchSettings, metrics: Arc<Metrics>) -> (Processor, Exporting)
where
    E: SpanExporter + 'static,
{
    let queue = Arc::new(Queue {
        spans: Mutex::new(Queued::default()),
        full: Notify::new(),
        queue_size: settings.queue_size.max(1),
        batch_size: settings.batch_size.max(1),
    });
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(export(exporter, queue.clone(), settings, metrics.clone(), stopped));
    let exporting =
        Exporting { stop, queue: queue.clone(), metrics: metrics.clone(), task: Mutex::new(Some(task)) };
    (Processor { queue, metrics }, exporting)
}

async fn export<E: SpanExporter>(
    exporter: E,
    queue: Arc<Queue>,
    settings: BatchSettings,
    metrics: Arc<Metrics>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut failing = false;
    loop {
        let stop = tokio::select! {
            () = queue.full.notified() => false,
            () = tokio::time::sleep(settings.schedule_delay) => false,
            _ = stopped.wait_for(|stop| *stop) => true,
        };
        // Every full batch queued, then what is left (at most one partial batch).
        loop {
            let batch = queue.take_batch();
            if batch.is_empty() {
                break;
            }
            let partial = batch.len() < queue.batch_size;
            send(&exporter, batch, settings.export_timeout, &metrics, &mut failing).await;
            if partial {
                break;
            }
        }
        if stop || *stopped.borrow() {
            break;
        }
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
