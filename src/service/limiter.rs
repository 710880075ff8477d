//! The request path of one `ShouldRateLimit` call, behind the gRPC endpoint (`server`):
//! `RateLimiter` takes a config snapshot, validates the request, plans its descriptors
//! (`plan`), charges the store once under one deadline, records (`record`) and responds
//! (`respond`). Also the request's budget: the store deadline from the caller's
//! `grpc-timeout`.
//!
//! Deciding returns the answer and a decision record (`decision`): what was planned,
//! charged and decided. The headers, the dynamic metadata and, for a sampled request, the
//! spans (`traced`) are read from it afterwards; deciding itself knows nothing of spans.
//!
//! Layout: this file is the request's flow; `charging` plans and charges the store;
//! `decision` is the record; `request` holds what is settled before deciding (validation,
//! the store budget); `settings` what the path runs with.

use std::borrow::Cow;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::config::Domain;
use crate::sources::overrides::{Mode, Overrides};
use crate::sources::serving::{Active, Live};
use crate::store::{MemoryStore, Store};
use crate::telemetry::escape::escape;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::trace::{RequestSpan, Tracing};

use super::wire::RateLimitRequest;
use super::{bounds, dynamic_metadata, headers, record, respond, traced};

mod charging;
mod decision;
mod request;
mod reserving;
mod settings;

use decision::{DecisionRecord, Route, Whole};
pub use request::{grpc_timeout, store_budget, validate};
pub use settings::Settings;

/// The rate-limit service: shared config, store, metrics and settings.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    live: Arc<Live>,
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    settings: Arc<Settings>,
    /// Buckets of `failure_mode: local` domains while the store fails (this instance only).
    local: Arc<MemoryStore>,
    /// Spans of sampled requests, when tracing is on.
    tracing: Option<Arc<Tracing>>,
    /// The incident switch (`POST /v1/override`).
    overrides: Arc<Overrides>,
}

impl RateLimiter {
    pub fn new(live: Arc<Live>, store: Arc<Store>, metrics: Arc<Metrics>, settings: Settings) -> RateLimiter {
        let local = Arc::new(MemoryStore::new(settings.local_max_keys));
        let overrides = Arc::new(Overrides::new(&settings.key_prefix, metrics.clone()));
        RateLimiter { live, store, metrics, settings: Arc::new(settings), local, tracing: None, overrides }
    }

    /// With the incident switch the admin port sets (`crate::sources::overrides`).
    pub fn with_overrides(mut self, overrides: Arc<Overrides>) -> RateLimiter {
        self.overrides = overrides;
        self
    }

    /// The incident switch this limiter honours.
    pub fn overrides(&self) -> Arc<Overrides> {
        self.overrides.clone()
    }

    /// With spans of sampled requests (`crate::telemetry::trace`).
    pub fn with_tracing(mut self, tracing: Option<Arc<Tracing>>) -> RateLimiter {
        self.tracing = tracing;
        self
    }

    /// The in-process limiter of `failure_mode: local` domains (for its metrics).
    pub fn local_store(&self) -> Arc<MemoryStore> {
        self.local.clone()
    }

    /// The serving config this limiter decides by (the RLQS service shares it).
    pub fn live(&self) -> Arc<Live> {
        self.live.clone()
    }

    /// The store this limiter charges (the RLQS service charges the same buckets).
    pub fn store(&self) -> Arc<Store> {
        self.store.clone()
    }

    /// The metrics this limiter records to.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// The settings of the request path (key prefix, key secret, store timeout).
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.clone()
    }

    /// Decides a validated request by `deadline`. Never fails: store errors are answered
    /// by the domain's failure policy.
    pub async fn decide(&self, request: &RateLimitRequest, deadline: Instant) -> RateLimitResponse {
        let active = self.live.load();
        self.answer(request, &active, deadline, false).await.0
    }

    /// The answer to a validated request on the config `active`: the codes as decided,
    /// then global shadow mode, the headers and the dynamic metadata; and the record of
    /// how it was decided. `probe`: the record tells what the store call did (a traced
    /// request; the untraced one does not pay for watching it).
    async fn answer<'a>(
        &self,
        request: &RateLimitRequest,
        active: &'a Active,
        deadline: Instant,
        probe: bool,
    ) -> (RateLimitResponse, DecisionRecord<'a>) {
        // An incident override of the domain (or of all): one atomic load when there is none.
        let incident = self.overrides.mode(&request.domain);
        let (mut response, mut record) = self.decide_codes(request, active, deadline, incident, probe).await;
        // Both read from the codes as decided, before shadow mode turns a denial into OK.
        let metadata = if self.settings.response_dynamic_metadata {
            record.passed(&response.statuses)
        } else {
            serde_json::Map::new()
        };
        // Also for an OVER_LIMIT answer: the denying limit's `response` fills its 429.
        let over = response.overall_code == Code::OverLimit as i32;
        let decided = if self.settings.response_headers || self.settings.ietf_headers || over {
            record.decided(self.settings.ietf_headers)
        } else {
            Vec::new()
        };
        // Global shadow mode (and a shadow override) covers every answer: charged,
        // failure-policy and oversized. Only a configured (so UTF-8) domain can be over its
        // limit: the label stays bounded.
        let shadow = self.settings.shadow_mode || incident == Some(Mode::Shadow);
        if shadow && respond::shadow(&mut response) {
            if let Ok(domain) = std::str::from_utf8(&request.domain) {
                self.metrics.shadow_override(domain);
            }
            record.shadowed = true;
        }
        if self.settings.response_headers {
            headers::add_headers(&mut response, &decided, self.settings.retry_after_jitter);
        }
        if let Some(names) = &self.settings.limit_headers {
            headers::add_limit_headers(&mut response, names);
        }
        if self.settings.ietf_headers {
            headers::add_ietf_headers(&mut response, &decided);
        }
        headers::add_denial_response(&mut response, &decided);
        if self.settings.response_dynamic_metadata {
            response.dynamic_metadata = Some(dynamic_metadata::build(request, metadata));
        }
        (response, record)
    }

    /// The response with the codes as decided (before global shadow mode and headers),
    /// counted (`record`), and the record of how they were decided.
    async fn decide_codes<'a>(
        &self,
        request: &RateLimitRequest,
        active: &'a Active,
        deadline: Instant,
        incident: Option<Mode>,
        probe: bool,
    ) -> (RateLimitResponse, DecisionRecord<'a>) {
        let version = active.snapshot.version.as_str();
        let domain = match self.screen(request, active, incident) {
            Ok(domain) => domain,
            Err(whole) => {
                return (
                    request::all_ok(request),
                    DecisionRecord::new(version, incident, Route::Whole(whole)),
                )
            }
        };
        if let Some(oversize) = self.settings.bounds.check(request) {
            self.metrics.oversized(oversize.as_str());
            let route = Route::Whole(Whole::Oversized(oversize.as_str()));
            return (
                bounds::answer(request, domain.failure_mode),
                DecisionRecord::new(version, incident, route),
            );
        }
        // A descriptor naming a reservation: that entry off before matching and keying.
        let (request, reservations) = match reserving::split(request, domain) {
            Some((stripped, ids)) => (Cow::Owned(stripped), ids),
            None => (Cow::Borrowed(request), Vec::new()),
        };
        // `--key-secret-file`: matched on the values sent, keyed (and counted, and shown)
        // on their keyed hashes only (a reservation's id too).
        let (keyed, reservations) = match &self.settings.key_secret {
            Some(secret) => (
                Cow::Owned(request.keyed(|value| secret.value(value))),
                reservations.iter().map(|id| id.as_ref().map(|id| secret.value(id).into())).collect(),
            ),
            None => (request.clone(), reservations),
        };
        let mut charged = self.charge_plans(domain, &request, &keyed, &reservations, deadline, probe).await;
        let (response, verdicts) = respond::respond(
            &charged.plans,
            &charged.results,
            domain.failure_mode,
            self.settings.near_limit_ratio,
        );
        let (plans, charges, local) = (&charged.plans, &charged.charges, &charged.local);
        record::record(&self.metrics, active, domain, &keyed, plans, charges, &verdicts, local);
        charged.verdicts = verdicts;
        (response, DecisionRecord::new(version, incident, Route::Charged(charged)))
    }

    /// The request's configured domain, or why every descriptor is answered OK without
    /// deciding: the domain is unknown, or an incident override opens it.
    fn screen<'a>(
        &self,
        request: &RateLimitRequest,
        active: &'a Active,
        incident: Option<Mode>,
    ) -> Result<&'a Domain, Whole> {
        // Configured domains are UTF-8: a domain that is not cannot be one of them.
        let known = std::str::from_utf8(&request.domain).ok().and_then(|d| active.snapshot.domain(d));
        let Some(domain) = known else {
            self.metrics.unknown_domain();
            tracing::debug!(domain = %escape(&request.domain), "unknown domain: every descriptor OK");
            return Err(Whole::UnknownDomain);
        };
        if let Some(mode) = incident {
            self.metrics.override_request(&domain.name, mode.as_str());
        }
        // The incident switch: no store, no decision, every descriptor OK.
        if incident == Some(Mode::Open) {
            return Err(Whole::OverrideOpen);
        }
        Ok(domain)
    }

    /// The instant by which the store must have answered a request that arrived `now`.
    fn deadline(&self, now: Instant, metadata: &MetadataMap) -> Instant {
        now + store_budget(self.settings.store_timeout, grpc_timeout(metadata))
    }

    /// The gRPC method: validates, decides, records the request's duration. The only error
    /// is `INVALID_ARGUMENT` for a structurally invalid request.
    pub async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        if let Some(span) = self.tracing.as_ref().and_then(|t| t.request_span(request.metadata())) {
            // Log lines of this request carry its trace and span ids.
            let (trace_id, span_id) = span.ids();
            let logs = tracing::info_span!("request", trace_id = %trace_id, span_id = %span_id);
            // Boxed: the traced future is much larger than the untraced one, and unboxed
            // it would size every request's future (tonic boxes each one) to its own.
            return Box::pin(self.should_rate_limit_traced(request, span).instrument(logs)).await;
        }
        let started = Instant::now();
        let deadline = self.deadline(started, request.metadata());
        let request = request.into_inner();
        validate(&request).map_err(Status::invalid_argument)?;
        let active = self.live.load();
        if let Some(error) = reserving_invalid(&request, &active) {
            return Err(Status::invalid_argument(error));
        }
        let (response, _) = self.answer(&request, &active, deadline, false).await;
        self.metrics.observe_request(started.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }

    /// [`should_rate_limit`](Self::should_rate_limit) of a sampled request: the same
    /// decision, and its spans, described from its record once it is answered. Cancelled
    /// at any await, the server span ends when `span` drops, with what it has.
    async fn should_rate_limit_traced(
        &self,
        request: Request<RateLimitRequest>,
        span: RequestSpan,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let deadline = self.deadline(started, request.metadata());
        let request = request.into_inner();
        span.set(traced::request_attributes(&request));
        if let Err(error) = validate(&request) {
            span.set(traced::invalid_attributes());
            span.fail(error.clone());
            span.end();
            return Err(Status::invalid_argument(error));
        }
        let active = self.live.load();
        if let Some(error) = reserving_invalid(&request, &active) {
            span.set(traced::invalid_attributes());
            span.fail(error.clone());
            span.end();
            return Err(Status::invalid_argument(error));
        }
        let (response, record) = self.answer(&request, &active, deadline, true).await;
        self.metrics.observe_request(started.elapsed().as_secs_f64());
        let mut observed = record.observed(request.descriptors.len());
        let values = self.tracing.as_ref().is_some_and(|t| t.descriptor_values());
        let overall = Code::try_from(response.overall_code).map_or("UNKNOWN", |c| c.as_str_name());
        tracing::debug!(domain = %escape(&request.domain), overall_code = overall, "decided");
        let shown = match (&self.settings.key_secret, values) {
            (Some(secret), true) => Cow::Owned(request.keyed(|value| secret.value(value))),
            _ => Cow::Borrowed(&request),
        };
        span.set(traced::server_attributes(&shown, &response, &observed, values));
        // The store's round trip: none on the memory store (its charge is a lock).
        if let Some(call) = observed.store.take().filter(|call| call.topology != "memory") {
            traced::store_span(&span, call);
        }
        span.end();
        Ok(Response::new(response))
    }
}

/// Why `request` is invalid in its domain of `active` (a descriptor whose only entry names
/// a reservation), if it is.
fn reserving_invalid(request: &RateLimitRequest, active: &Active) -> Option<String> {
    let domain = std::str::from_utf8(&request.domain).ok().and_then(|d| active.snapshot.domain(d))?;
    reserving::invalid(request, domain)
}

#[cfg(test)]
mod tests;
