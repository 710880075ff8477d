//! What the settings name, read and built before anything serves: the config (from its
//! files, or empty for the xDS client to fill), the span exporter, the secrets (admin
//! token, key secret) and the request path (`RateLimiter`). A file named but unreadable
//! is a startup error.

use std::sync::Arc;

use anyhow::Context;

use crate::operate::admin::AdminToken;
use crate::service::{RateLimiter, Settings};
use crate::sources::serving::Live;
use crate::store::key::KeySecret;
use crate::store::Store;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::trace::Tracing;

use super::settings::ServeSettings;

/// The config from its files (a bad one is an error), or an empty one the xDS client fills.
pub(super) fn load_config(settings: &ServeSettings, metrics: Arc<Metrics>) -> anyhow::Result<Live> {
    let live = match &settings.xds {
        None => Live::load_initial_with(&settings.config, settings.config_options, metrics)
            .map_err(|errors| anyhow::anyhow!("invalid config {}:\n{errors}", settings.config.display()))?,
        Some(xds) => {
            if let Some(tls) = &xds.tls {
                crate::sources::xds::check_files(tls).map_err(|e| anyhow::anyhow!("xDS TLS: {e}"))?;
            }
            for (key, value) in &xds.headers {
                tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(key.as_bytes()).map_err(
                    |_| anyhow::anyhow!("xDS header name {key:?} is not a valid gRPC metadata key"),
                )?;
                tonic::metadata::MetadataValue::<tonic::metadata::Ascii>::try_from(value.as_str()).map_err(
                    |_| anyhow::anyhow!("the value of xDS header {key:?} is not valid gRPC metadata"),
                )?;
            }
            let state = crate::sources::serving::XdsState {
                server: xds.server.clone(),
                node_id: xds.node_id.clone(),
                force_start: xds.force_start,
                ..Default::default()
            };
            Live::for_xds(settings.config_options, metrics, state)
        }
    };
    Ok(live.with_ready_needs_domain(settings.ready_needs_domain))
}

/// Logs what the config files gave (an xDS config is logged as it arrives).
pub(super) fn log_loaded(live: &Live) {
    let active = live.load();
    tracing::info!(
        version = %active.snapshot.version,
        domains = active.snapshot.domains.len(),
        rules = active.snapshot.rule_count(),
        "config loaded"
    );
}

/// The span exporter, when `--tracing-*` turned it on.
pub(super) fn start_tracing(
    settings: &ServeSettings,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Option<Arc<Tracing>>> {
    let Some(trace) = &settings.tracing else { return Ok(None) };
    let started = Tracing::start(trace, metrics.clone()).map_err(anyhow::Error::msg)?;
    tracing::info!(
        protocol = trace.protocol.as_str(),
        endpoint = %trace.endpoint,
        ratio = trace.sampling.ratio,
        parent_based = trace.sampling.parent_based,
        service = %trace.service_name,
        "tracing on"
    );
    Ok(Some(Arc::new(started)))
}

/// The request path with the settings' request-path part (`service::Settings`).
pub(super) fn limiter(
    settings: &ServeSettings,
    live: &Arc<Live>,
    store: &Arc<Store>,
    metrics: &Arc<Metrics>,
    key_secret: Option<KeySecret>,
) -> RateLimiter {
    let path = Settings {
        store_timeout: settings.store_timeout,
        key_prefix: settings.redis_key_prefix.clone(),
        near_limit_ratio: settings.near_limit_ratio,
        shadow_mode: settings.shadow_mode,
        response_headers: settings.response_headers,
        limit_headers: settings.limit_headers.clone(),
        ietf_headers: settings.ietf_headers,
        retry_after_jitter: settings.retry_after_jitter,
        response_dynamic_metadata: settings.response_dynamic_metadata,
        bounds: settings.bounds,
        local_max_keys: settings.memory_max_keys,
        key_secret,
    };
    RateLimiter::new(live.clone(), store.clone(), metrics.clone(), path)
}

/// The admin token from `--admin-token-file`: an unreadable or empty file is a startup error
/// (an operator who asked for a token must not get an open admin port).
pub(super) fn admin_token(settings: &ServeSettings) -> anyhow::Result<Option<AdminToken>> {
    let Some(path) = &settings.admin_token_file else { return Ok(None) };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the admin token {}", path.display()))?;
    let token = AdminToken::new(&text)
        .with_context(|| format!("the admin token file {} is empty", path.display()))?;
    tracing::info!(
        token = token.id(),
        "admin token loaded; audit lines name it by this id, in this process only"
    );
    Ok(Some(token))
}

/// The secret of `--key-secret-file`: an unreadable file or one too short is a startup
/// error (an operator who asked for private keys must not get clear ones). Never logged.
pub(super) fn key_secret(settings: &ServeSettings) -> anyhow::Result<Option<KeySecret>> {
    let Some(path) = &settings.key_secret_file else { return Ok(None) };
    let bytes = std::fs::read(path).with_context(|| format!("reading the key secret {}", path.display()))?;
    let secret =
        KeySecret::new(&bytes).map_err(|e| anyhow::anyhow!("the key secret file {}: {e}", path.display()))?;
    tracing::info!(file = %path.display(), "key secret loaded: request values enter bucket keys keyed-hashed");
    Ok(Some(secret))
}
