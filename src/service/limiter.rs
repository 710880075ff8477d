//! The request path of one `ShouldRateLimit` call, behind the gRPC endpoint (`server`):
//! `RateLimiter` takes a config snapshot, validates the request, plans its descriptors
//! (`plan`), charges the store once under one deadline, records (`record`) and responds
//! (`respond`). Also the request's budget: the store deadline from the caller's
//! `grpc-timeout`.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::algorithm::Decision;
use crate::config::{Consistency, FailureMode};
use crate::sources::overrides::{Mode, Overrides};
use crate::sources::serving::Live;
use crate::store::approx::Approx;
use crate::store::key::KeySecret;
use crate::store::{probe, Charge, Groups, MemoryStore, Store, StoreError};
use crate::telemetry::escape::escape;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::trace::{RequestSpan, Tracing};

use super::traced::{self, decided_by, Observed, StoreCall};
use super::wire::RateLimitRequest;
use super::{bounds, dynamic_metadata, headers, plan, record, respond};

/// Request-path settings fixed at startup.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Longest a request waits for the store (also bounded by the caller's grpc-timeout).
    pub store_timeout: Duration,
    /// Prepended to every bucket key (for a Redis shared with other tenants).
    pub key_prefix: String,
    /// A decision counts as `near_limit` above this share of the limit consumed.
    pub near_limit_ratio: f64,
    /// Global shadow mode: decide and count everything, answer OK.
    pub shadow_mode: bool,
    /// Add `x-ratelimit-*` and `retry-after` to `response_headers_to_add`.
    pub response_headers: bool,
    /// Add the peer's `RateLimit-Limit/-Remaining/-Reset` under these names.
    pub limit_headers: Option<headers::LimitHeaderNames>,
    /// `--ratelimit-headers ietf`: add the draft standard's `RateLimit-Policy` and `RateLimit`.
    pub ietf_headers: bool,
    /// `--retry-after-jitter`: up to this share of the wait added to `retry-after` at random.
    pub retry_after_jitter: f64,
    /// Answer the request and the passed rules' `metadata` as `dynamic_metadata`.
    pub response_dynamic_metadata: bool,
    /// Bounds on request size; past them the failure policy answers.
    pub bounds: bounds::Bounds,
    /// Cap on buckets of the in-memory limiter used by `failure_mode: local` domains.
    pub local_max_keys: usize,
    /// `--key-secret-file`: request values enter keys, metrics, the hot-key view and spans
    /// keyed-hashed (`KeySecret::value`), never in the clear.
    pub key_secret: Option<KeySecret>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            store_timeout: Duration::from_millis(10),
            key_prefix: String::new(),
            near_limit_ratio: 0.8,
            shadow_mode: false,
            response_headers: false,
            limit_headers: None,
            ietf_headers: false,
            retry_after_jitter: 0.0,
            response_dynamic_metadata: false,
            bounds: bounds::Bounds::default(),
            local_max_keys: 100_000,
            key_secret: None,
        }
    }
}

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

    /// Decides a validated request by `deadline`. Never fails: store errors are answered
    /// by the domain's failure policy.
    pub async fn decide(&self, request: &RateLimitRequest, deadline: Instant) -> RateLimitResponse {
        self.decide_observed(request, deadline, None).await
    }

    /// [`decide`](Self::decide), telling `observed` what it saw (a traced request).
    async fn decide_observed(
        &self,
        request: &RateLimitRequest,
        deadline: Instant,
        mut observed: Option<&mut Observed>,
    ) -> RateLimitResponse {
        // An incident override of the domain (or of all): one atomic load when there is none.
        let incident = self.overrides.mode(&request.domain);
        let (mut response, metadata, decided) =
            self.decide_codes(request, deadline, incident, observed.as_deref_mut()).await;
        // Global shadow mode (and a shadow override) covers every answer: charged,
        // failure-policy and oversized. Only a configured (so UTF-8) domain can be over its
        // limit: the label stays bounded.
        let shadow = self.settings.shadow_mode || incident == Some(Mode::Shadow);
        if shadow && respond::shadow(&mut response) {
            if let Ok(domain) = std::str::from_utf8(&request.domain) {
                self.metrics.shadow_override(domain);
            }
            if let Some(observed) = observed {
                observed.shadowed = true;
            }
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
        response
    }

    /// The response with the codes as decided (before global shadow mode and headers), the
    /// merged `metadata` of the rules passed (only with `--response-dynamic-metadata`), and
    /// per descriptor the deciding limit's true count and window in seconds (for headers).
    async fn decide_codes(
        &self,
        request: &RateLimitRequest,
        deadline: Instant,
        incident: Option<Mode>,
        mut observed: Option<&mut Observed>,
    ) -> (RateLimitResponse, serde_json::Map<String, serde_json::Value>, Vec<Option<headers::Decided>>) {
        let active = self.live.load();
        if let Some(observed) = observed.as_deref_mut() {
            observed.config_version = active.snapshot.version.clone();
        }
        // Configured domains are UTF-8: a domain that is not cannot be one of them.
        let known = std::str::from_utf8(&request.domain).ok().and_then(|d| active.snapshot.domain(d));
        let Some(domain) = known else {
            self.metrics.unknown_domain();
            tracing::debug!(domain = %escape(&request.domain), "unknown domain: every descriptor OK");
            if let Some(observed) = observed {
                traced::describe_all(observed, request.descriptors.len(), decided_by::UNKNOWN_DOMAIN);
            }
            return (unknown_domain(request), serde_json::Map::new(), Vec::new());
        };
        if let Some(mode) = incident {
            self.metrics.override_request(&domain.name, mode.as_str());
            if let Some(observed) = observed.as_deref_mut() {
                observed.incident = Some(mode.as_str());
            }
        }
        if incident == Some(Mode::Open) {
            // The incident switch: no store, no decision, every descriptor OK.
            if let Some(observed) = observed {
                traced::describe_all(observed, request.descriptors.len(), decided_by::OVERRIDE_OPEN);
            }
            return (unknown_domain(request), serde_json::Map::new(), Vec::new());
        }
        if let Some(oversize) = self.settings.bounds.check(request) {
            self.metrics.oversized(oversize.as_str());
            if let Some(observed) = observed {
                observed.oversized = Some(oversize.as_str());
                traced::describe_all(observed, request.descriptors.len(), decided_by::FAILURE_POLICY);
            }
            return (bounds::answer(request, domain.failure_mode), serde_json::Map::new(), Vec::new());
        }
        // `--key-secret-file`: matched on the values sent, keyed (and counted, and shown)
        // on their keyed hashes only.
        let keyed_request;
        let keyed = match &self.settings.key_secret {
            Some(secret) => {
                keyed_request = request.keyed(|value| secret.value(value));
                &keyed_request
            }
            None => request,
        };
        let (plans, charges, groups) = plan::plan_keyed(
            domain,
            &request.descriptors,
            &keyed.descriptors,
            request.hits_addend,
            &self.settings.key_prefix,
        );
        let mut approximate = false;
        let mut results = match self.store.approx() {
            // No Redis on the request path: the local estimates decide (`store::approx`).
            // A request's own `limit` of an algorithm the mode does not serve (GCRA, the
            // default of `--default-algorithm`) sends the request to the store exactly.
            // Until its heartbeat has counted the other instances (`Approx::is_ready`), an
            // instance decides approximate domains exactly. A bucket it has never read is
            // read first, on this request's path, and a group with a consume larger than a
            // share is decided against Redis (`Store::charge_approximate`).
            Some(approx)
                if domain.consistency == Consistency::Approximate
                    && approx.is_ready()
                    && charges.iter().all(Approx::serves) =>
            {
                approximate = true;
                self.store.charge_approximate(approx, &charges, &groups, deadline).await
            }
            _ => {
                let leasable = self.leasable(&plans, charges.len());
                let call = observed.as_deref_mut().map(|o| &mut o.store);
                self.charge(&charges, &groups, &leasable, deadline, call).await
            }
        };
        let local = if domain.failure_mode == FailureMode::Local {
            self.charge_locally(&domain.name, &charges, &groups, &mut results)
        } else {
            Vec::new()
        };
        let (response, verdicts) =
            respond::respond(&plans, &results, domain.failure_mode, self.settings.near_limit_ratio);
        if let Some(observed) = observed {
            traced::describe(observed, &plans, &results, &verdicts, &local, approximate, &charges);
        }
        record::record(&self.metrics, &active, domain, keyed, &plans, &charges, &verdicts, &local);
        let metadata = if self.settings.response_dynamic_metadata {
            dynamic_metadata::passed(&plans, &response.statuses)
        } else {
            serde_json::Map::new()
        };
        // Also for an OVER_LIMIT answer: the denying limit's `response` fills its 429.
        let over = response.overall_code == Code::OverLimit as i32;
        let decided = if self.settings.response_headers || self.settings.ietf_headers || over {
            decided(&plans, &verdicts, self.settings.ietf_headers)
        } else {
            Vec::new()
        };
        (response, metadata, decided)
    }

    async fn charge(
        &self,
        charges: &[Charge],
        groups: &Groups,
        leasable: &[bool],
        deadline: Instant,
        observed: Option<&mut Option<StoreCall>>,
    ) -> Vec<Result<Decision, StoreError>> {
        if charges.is_empty() {
            return Vec::new();
        }
        let started = Instant::now();
        let charging = self.store.charge_leasing(charges, groups, leasable, deadline);
        let results = match observed {
            None => charging.await,
            Some(call) => {
                let from = std::time::SystemTime::now();
                // Boxed, so that the untraced path's future stays the size it was.
                let (results, seen) = Box::pin(probe::observe(charging)).await;
                let error = results.iter().find_map(|r| r.as_ref().err()).cloned();
                let times = (from, std::time::SystemTime::now());
                let topology = self.store.name();
                *call = Some(StoreCall { topology, charges: charges.len(), times, seen, error });
                results
            }
        };
        let outcome = results.iter().find_map(|r| r.as_ref().err()).map_or("ok", StoreError::kind);
        self.metrics.observe_store(self.store.name(), outcome, started.elapsed().as_secs_f64());
        results
    }

    /// Which charges may be served from leases: those of rules with `lease: true`, or of
    /// every rule with `--lease-hot-keys` (never a request's own `limit`, nor a rule with a
    /// `penalty`, which must see every charge). Empty when the
    /// store has no leases or no charge may use them (the common case: no allocation).
    fn leasable(&self, plans: &[plan::Plan<'_>], len: usize) -> Vec<bool> {
        let Some(every_rule) = self.store.leases().map(|t| t.settings().every_rule) else {
            return Vec::new();
        };
        let mut leasable = Vec::new();
        for plan in plans {
            let plan::Plan::Limited(limit) = plan else { continue };
            if limit.rule.is_some_and(|rule| (every_rule || rule.lease) && !rule.penalized()) {
                leasable.resize(len, false);
                leasable[limit.charges.clone()].fill(true);
            }
        }
        leasable
    }

    /// `failure_mode: local`: a group any of whose charges failed in the store goes, whole,
    /// to this instance's memory (on a Redis Cluster, a part of a group spread over several
    /// masters may have been charged there as well: counted twice, never freed early).
    /// Returns which charges were decided here (empty when none was).
    fn charge_locally(
        &self,
        domain: &str,
        charges: &[Charge],
        groups: &Groups,
        results: &mut [Result<Decision, StoreError>],
    ) -> Vec<bool> {
        let now = crate::store::memory::now_us();
        let mut local = Vec::new();
        for range in groups.ranges(charges.len()) {
            if results[range.clone()].iter().all(Result::is_ok) {
                continue;
            }
            local.resize(charges.len(), false);
            local[range.clone()].fill(true);
            let decisions = self.local.charge_group_at(&charges[range.clone()], now);
            for (result, decision) in results[range].iter_mut().zip(decisions) {
                *result = Ok(decision);
                self.metrics.local_decision(domain);
            }
        }
        local
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
        let response = self.decide_observed(&request, deadline, None).await;
        self.metrics.observe_request(started.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }
}

impl RateLimiter {
    /// [`should_rate_limit`](Self::should_rate_limit) of a sampled request: the same
    /// decision, and its spans. Cancelled at any await, the server span ends when `span`
    /// drops, with what it has.
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
        let mut observed = Observed::default();
        let response = self.decide_observed(&request, deadline, Some(&mut observed)).await;
        self.metrics.observe_request(started.elapsed().as_secs_f64());
        let values = self.tracing.as_ref().is_some_and(|t| t.descriptor_values());
        let overall = Code::try_from(response.overall_code).map_or("UNKNOWN", |c| c.as_str_name());
        tracing::debug!(domain = %escape(&request.domain), overall_code = overall, "decided");
        let shown = match (&self.settings.key_secret, values) {
            (Some(secret), true) => std::borrow::Cow::Owned(request.keyed(|value| secret.value(value))),
            _ => std::borrow::Cow::Borrowed(&request),
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

/// Per descriptor, what the headers take from the limit that decided it (see
/// `headers::Decided`); its policy name only when `named`.
fn decided(
    plans: &[plan::Plan<'_>],
    verdicts: &[Option<respond::Verdict>],
    named: bool,
) -> Vec<Option<headers::Decided>> {
    plans
        .iter()
        .zip(verdicts)
        .map(|(plan, verdict)| match (plan, verdict) {
            (plan::Plan::Limited(limit), Some(verdict)) => limit.limits().nth(verdict.limit).map(|one| {
                let policy = match (named, limit.name_of(one), limit.rule) {
                    (false, _, _) => String::new(),
                    (true, "", Some(rule)) => rule.label().to_string(),
                    (true, name, _) => name.to_string(),
                };
                headers::Decided {
                    count: one.params.limit,
                    window: one.window_seconds(),
                    policy,
                    response: one.response.clone(),
                }
            }),
            _ => None,
        })
        .collect()
}

/// Structural checks: what makes a request meaningless, not merely unusual.
///
/// A descriptor without entries is not one of them: Envoy sends it when every action of a
/// `rate_limits` entry is `skip_if_absent` and none applied (a header the client left out).
/// Refusing the request would let Envoy's `failure_mode_deny` (allow, by default) decide for
/// every descriptor of it — per-client limits included, bypassed by omitting a header. It
/// matches no rule: OK without a limit, and the request's other descriptors are decided.
pub fn validate(request: &RateLimitRequest) -> Result<(), String> {
    if request.domain.is_empty() {
        return Err("domain must not be empty".into());
    }
    if request.descriptors.is_empty() {
        return Err("at least one descriptor is required".into());
    }
    for (i, descriptor) in request.descriptors.iter().enumerate() {
        if let Some(j) = descriptor.entries.iter().position(|e| e.key.is_empty()) {
            return Err(format!("descriptors[{i}].entries[{j}] has an empty key"));
        }
    }
    Ok(())
}

/// A domain with no policy: every descriptor OK, nothing charged.
fn unknown_domain(request: &RateLimitRequest) -> RateLimitResponse {
    let ok = DescriptorStatus { code: Code::Ok as i32, ..Default::default() };
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![ok; request.descriptors.len()],
        ..Default::default()
    }
}

/// How long the store may take: the store timeout, but never past what the caller allows
/// less a margin to answer in. The gRPC server enforces the caller's `grpc-timeout` itself
/// (its clock starts before ours) by dropping the handler: a store call still pending then
/// would end as a gRPC error, not as the domain's failure policy, and the breaker would
/// never hear of the failure. The margin is a tenth of the caller's timeout, at least 1 ms.
pub fn store_budget(store_timeout: Duration, caller: Option<Duration>) -> Duration {
    match caller {
        Some(caller) => {
            let margin = (caller / 10).max(Duration::from_millis(1));
            store_timeout.min(caller.saturating_sub(margin))
        }
        None => store_timeout,
    }
}

/// The caller's `grpc-timeout` header (e.g. `20m` = 20 ms), if present and well formed.
pub fn grpc_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let raw = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = raw.split_at(raw.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
