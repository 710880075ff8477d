//! `GET /v1/usage` and `POST /v1/reset`: how much of a descriptor's quota is left, and
//! giving it back, for an operator answering a customer.
//!
//! Both read `domain` and `descriptor` (`query`), find the limits the descriptor matches
//! and their bucket keys with the request path's own `plan` (so the keys are exactly the
//! ones the server charges), and describe each bucket with a peek (`Hits::Peek`: the store
//! answers the bucket as it is and writes nothing). A bucket serving a penalty answers
//! `remaining` 0 and `reset_seconds` until the penalty ends (`penalty_seconds` is the
//! limit's configured penalty). Reset deletes the keys first
//! (`Store::reset`, and this instance's `failure_mode: local` buckets), then answers the
//! buckets as they are after it. Every reset — accepted or refused — writes one audit log
//! line (`audit`) and each accepted one counts in `tollgate_admin_resets_total{domain}`.
//! On a port bound beyond loopback without a token usage is refused (403): it would tell
//! anyone whether a value they guess (an address, a user) is a client. A descriptor whose
//! bucket Envoys hold over RLQS lists them as `rlqs_holders` (the claims ledger).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Value};
use tokio::time::{Duration, Instant};

use crate::algorithm::{Algorithm, Decision, Hits};
use crate::config::{Domain, Limit, Rule};
use crate::service::plan::{self, Plan};
use crate::service::wire::RateLimitDescriptor;
use crate::store::key::{window_keys_around, KeySecret};
use crate::store::{Charge, StoreError};
use crate::telemetry::escape::escape;

use super::audit;
use super::query::{self, Target};
use super::state::{error, Admin, Caller, Refusal};

/// How long a usage or reset waits for the store: an operator's call, not Envoy's 20 ms.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// One bucket the descriptor matches: a limit of its rule and the peek at its key.
struct Bucket<'a> {
    rule: &'a Rule,
    limit: &'a Limit,
    charge: Charge,
}

/// The buckets of every limit `entries` match in `domain`, through the request path's
/// `plan`, each with a peek charge.
fn buckets<'a>(
    domain: &'a Domain,
    entries: &[(Vec<u8>, Vec<u8>)],
    key_prefix: &str,
    secret: Option<&KeySecret>,
) -> Vec<Bucket<'a>> {
    let mut descriptor = RateLimitDescriptor::from_entries(entries.iter().cloned());
    // An explicit `hits_addend: 0` is a peek: plan builds charges that never write.
    descriptor.hits_addend = Some(UInt64Value { value: 0 });
    // Under `--key-secret-file`, the raw values an operator gives are keyed as requests are.
    let keyed = match secret {
        Some(secret) => {
            let mut keyed =
                RateLimitDescriptor::from_entries(entries.iter().map(|(k, v)| (k, secret.value(v))));
            keyed.hits_addend = Some(UInt64Value { value: 0 });
            keyed
        }
        None => descriptor.clone(),
    };
    let (plans, charges, _groups) = plan::plan_keyed(
        domain,
        std::slice::from_ref(&descriptor),
        std::slice::from_ref(&keyed),
        0,
        key_prefix,
    );
    let mut buckets = Vec::new();
    for plan in &plans {
        let Plan::Limited(limited) = plan else { continue };
        let Some(rule) = limited.rule else { continue };
        // One charge per limit not replaced, in the rule's order.
        for (n, at) in limited.charges.clone().enumerate() {
            let (Some(limit), Some(charge)) = (rule.limits().get(limited.rule_index(n)), charges.get(at))
            else {
                continue;
            };
            buckets.push(Bucket { rule, limit, charge: Charge { hits: Hits::Peek, ..charge.clone() } });
        }
    }
    buckets
}

/// One entry of `limits`: the limit's numbers and its bucket as `decision` describes it.
fn limit_json(bucket: &Bucket<'_>, decision: &Decision) -> Value {
    let limit = bucket.limit;
    let capacity = limit.capacity();
    let remaining = decision.remaining.min(capacity);
    json!({
        "rule": bucket.rule.label(),
        "name": limit.name.as_deref().or(bucket.rule.name.as_deref()),
        "requests_per_unit": limit.params.limit,
        "unit": limit.unit.as_str(),
        "unit_multiplier": limit.multiplier,
        "algorithm": limit.params.algorithm.as_str(),
        "capacity": capacity,
        "consumed": capacity - remaining,
        "remaining": remaining,
        "reset_seconds": decision.reset_us.div_ceil(1_000_000),
        "penalty_seconds": limit.penalty_seconds(),
        // Added with calendar periods: the window in words, and a calendar limit's period
        // and next reset (null for any other limit).
        "period": limit.period_text(),
        "calendar": limit.calendar_view(crate::store::memory::now_us()),
    })
}

/// The answer's body: the domain and descriptor as read (escaped) and each bucket.
fn body(target: &Target, limits: Vec<Value>) -> Value {
    let descriptor: Vec<Value> =
        target.entries.iter().map(|(k, v)| json!({ "key": escape(k), "value": escape(v) })).collect();
    json!({ "domain": escape(&target.domain), "descriptor": descriptor, "limits": limits })
}

/// Peeks at every bucket (one store call); each bucket's entry of `limits`. In Redis,
/// whatever the domain's consistency (approximate mode writes the same keys); an
/// approximate bucket this instance holds adds its local estimate as `approximate`.
async fn read(admin: &Admin, buckets: &[Bucket<'_>]) -> Result<Vec<Value>, StoreError> {
    let batch: Vec<Charge> = buckets.iter().map(|b| b.charge.clone()).collect();
    let results = admin.store.charge(&batch, Instant::now() + STORE_TIMEOUT).await;
    buckets
        .iter()
        .zip(results)
        .map(|(bucket, result)| {
            let mut entry = limit_json(bucket, &result?);
            if let Some(view) = admin.store.approx().and_then(|a| a.view(&bucket.charge.key)) {
                entry["approximate"] = json!({
                    "tier": view.tier.as_str(),
                    "level": view.level,
                    "synced_ms_ago": view.synced_ago_us.map(|us| us / 1000),
                    "unsent": view.pending,
                });
            }
            Ok(entry)
        })
        .collect()
}

/// What a request asked for, or why it cannot be read.
fn target(request: &Request) -> Result<Target, Refusal> {
    query::parse(request.uri().query()).map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, e))
}

fn unknown_domain(target: &Target) -> Response {
    error(StatusCode::NOT_FOUND, format!("unknown domain {:?}", escape(&target.domain)))
}

fn store_failed(e: &StoreError) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, format!("the store did not answer: {e}"))
}

/// `GET /v1/usage?domain=D&descriptor=k=v,…`: the descriptor's buckets, nothing charged.
pub async fn usage(State(admin): State<Admin>, request: Request) -> Response {
    if let Err(refused) = admin.check_token(request.headers()).and_then(|()| admin.check_not_open()) {
        return refused.into_response();
    }
    let target = match target(&request) {
        Ok(target) => target,
        Err(refused) => return refused.into_response(),
    };
    let active = admin.live.load();
    let Some(domain) = std::str::from_utf8(&target.domain).ok().and_then(|d| active.snapshot.domain(d))
    else {
        return unknown_domain(&target);
    };
    let buckets = buckets(domain, &target.entries, &admin.key_prefix, admin.key_secret.as_deref());
    let limits = match read(&admin, &buckets).await {
        Ok(limits) => limits,
        Err(e) => return store_failed(&e),
    };
    let mut answer = body(&target, limits);
    if let (Some(streams), Some(first)) = (&admin.quota, buckets.first()) {
        match rlqs_holders(&admin, streams, &first.charge.key).await {
            Ok(holders) => answer["rlqs_holders"] = holders,
            Err(e) => return store_failed(&e),
        }
    }
    Json(answer).into_response()
}

/// The Envoys holding the descriptor's bucket over RLQS (the claims ledger): each one's
/// name, latest demand, whether its stream is open, and its claim (the tokens it may spend
/// without asking until its assignment expires). Empty when no Envoy holds it.
async fn rlqs_holders(
    admin: &Admin,
    streams: &crate::service::rlqs::Streams,
    key: &str,
) -> Result<Value, StoreError> {
    let ledger_key = crate::service::rlqs::Quota::ledger_key(key);
    let deadline = Instant::now() + STORE_TIMEOUT;
    let mut holders = admin.store.holders(streams.quota().ledger(), &ledger_key, deadline).await?;
    holders.sort_by(|a, b| a.holder.cmp(&b.holder));
    Ok(holders
        .iter()
        .map(|h| json!({ "envoy": h.holder, "demand": h.demand, "live": h.live, "claim": h.claim }))
        .collect())
}

/// The target as the audit line names it: under `--key-secret-file`, its values keyed as
/// the request path keys them (no log holds a client's value in the clear).
fn audited<'t>(target: &'t Target, admin: &Admin) -> std::borrow::Cow<'t, Target> {
    match admin.key_secret.as_deref() {
        None => std::borrow::Cow::Borrowed(target),
        Some(secret) => std::borrow::Cow::Owned(Target {
            domain: target.domain.clone(),
            entries: target.entries.iter().map(|(k, v)| (k.clone(), secret.value(v))).collect(),
        }),
    }
}

/// `keys` with the window keys of the fixed- and sliding-window buckets among `buckets`
/// (the counts plain window commands keep beside the bucket: `store::key::window_key`).
fn with_window_keys(buckets: &[Bucket<'_>], mut keys: Vec<String>) -> Vec<String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
    for bucket in buckets {
        let params = &bucket.charge.params;
        if matches!(params.algorithm, Algorithm::FixedWindow | Algorithm::SlidingWindow)
            && params.period.is_none()
        {
            keys.extend(window_keys_around(&bucket.charge.key, params.unit_us, now));
        }
    }
    keys
}

/// `POST /v1/reset?domain=D&descriptor=k=v,…`: deletes the descriptor's buckets and
/// answers them as they are after it. Audited whatever the outcome.
pub async fn reset(State(admin): State<Admin>, request: Request) -> Response {
    let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let mut caller = Caller { client, token: None };
    if let Err(refused) = admin.check_reset(request.headers(), &mut caller) {
        audit::refused(&caller, None, refused.status);
        return refused.into_response();
    }
    let target = match target(&request) {
        Ok(target) => target,
        Err(refused) => {
            audit::refused(&caller, None, refused.status);
            return refused.into_response();
        }
    };
    let active = admin.live.load();
    let Some(domain) = std::str::from_utf8(&target.domain).ok().and_then(|d| active.snapshot.domain(d))
    else {
        audit::refused(&caller, Some(&audited(&target, &admin)), StatusCode::NOT_FOUND);
        return unknown_domain(&target);
    };
    let buckets = buckets(domain, &target.entries, &admin.key_prefix, admin.key_secret.as_deref());
    let keys: Vec<String> = buckets.iter().map(|b| b.charge.key.clone()).collect();
    if let Err(e) =
        admin.store.reset(&with_window_keys(&buckets, keys.clone()), Instant::now() + STORE_TIMEOUT).await
    {
        audit::failed(&caller, &audited(&target, &admin), keys.len(), &e);
        return store_failed(&e);
    }
    // This instance's `failure_mode: local` buckets (other instances keep theirs).
    for key in &keys {
        admin.local.remove(key);
    }
    admin.metrics.admin_reset(&domain.name);
    audit::reset(&caller, &audited(&target, &admin), keys.len());
    match read(&admin, &buckets).await {
        Ok(limits) => Json(body(&target, limits)).into_response(),
        Err(e) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the buckets were reset, but reading them back failed: {e}"),
        ),
    }
}
