//! The tracing flags (`--tracing` and `--tracing-*`, each also a `TOLLGATE_*` variable),
//! envoyproxy/ratelimit's `TRACING_*` variables and the standard `OTEL_*` ones, honoured
//! whenever Tollgate runs (peer mode or not). A flag or `TOLLGATE_*` variable wins over
//! the peer's variable, which wins over the standard one; an empty variable counts as
//! unset. Tracing is on only when asked for (`--tracing`, `TRACING_ENABLED=true`): an
//! endpoint alone turns nothing on.

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::telemetry::trace::{BatchSettings, ExportProtocol, Sampling, TraceSettings};

use super::values::parse_share;
use super::xds::parse_go_bool;

/// `--tracing-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies, to `<endpoint>/v1/traces`.
    Http,
}

#[derive(Debug, Clone, Default, Args)]
pub struct TracingFlags {
    /// Export spans of sampled requests over OTLP, true|false [TRACING_ENABLED; default
    /// false]. See docs/observability.md, "Tracing".
    #[arg(
        long = "tracing",
        env = "TOLLGATE_TRACING",
        value_parser = parse_go_bool,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub tracing: Option<bool>,
    /// OTLP transport [TRACING_EXPORTER_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    /// OTEL_EXPORTER_OTLP_PROTOCOL; default http].
    #[arg(long, env = "TOLLGATE_TRACING_PROTOCOL", value_enum)]
    pub tracing_protocol: Option<ProtocolArg>,
    /// The collector, e.g. http://tempo:4318 (HTTP: /v1/traces is appended) or
    /// http://tempo:4317 (gRPC) [OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given,
    /// OTEL_EXPORTER_OTLP_ENDPOINT; default localhost:4318 or :4317].
    #[arg(long, env = "TOLLGATE_TRACING_ENDPOINT")]
    pub tracing_endpoint: Option<String>,
    /// Share of traces sampled, 0 to 1; a caller's sampled flag decides for its trace
    /// [TRACING_SAMPLING_RATE, OTEL_TRACES_SAMPLER(_ARG); default 1].
    #[arg(long, env = "TOLLGATE_TRACING_SAMPLE_RATIO", value_parser = parse_share)]
    pub tracing_sample_ratio: Option<f64>,
    /// service.name of the spans [TRACING_SERVICE_NAME, OTEL_SERVICE_NAME; default tollgate].
    #[arg(long, env = "TOLLGATE_TRACING_SERVICE_NAME")]
    pub tracing_service_name: Option<String>,
    /// Put descriptor values into spans (escaped, each cut to 64 bytes): client
    /// identities (IPs, user ids) then reach the trace store.
    #[arg(long, env = "TOLLGATE_TRACING_DESCRIPTOR_VALUES")]
    pub tracing_descriptor_values: bool,
}

impl TracingFlags {
    /// The tracing settings, or `None` when tracing is off; `env` reads a variable.
    pub fn choose(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<TraceSettings>, String> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let enabled = match (self.tracing, var("TRACING_ENABLED")) {
            (Some(on), _) => on,
            (None, Some(text)) => parse_go_bool(text.trim()).map_err(|e| format!("TRACING_ENABLED: {e}"))?,
            (None, None) => false,
        };
        if !enabled {
            return Ok(None);
        }
        let protocol = self.protocol(&var)?;
        let endpoint = self.endpoint(protocol, &var)?;
        let sampling = self.sampling(&var)?;
        let service_name = self
            .tracing_service_name
            .clone()
            .or_else(|| var("TRACING_SERVICE_NAME"))
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "tollgate".to_string());
        let service_instance_id = var("TRACING_SERVICE_INSTANCE_ID").unwrap_or_else(random_instance_id);
        Ok(Some(TraceSettings {
            protocol,
            endpoint,
            sampling,
            service_name,
            service_namespace: var("TRACING_SERVICE_NAMESPACE"),
            service_instance_id,
            descriptor_values: self.tracing_descriptor_values,
            batch: batch(&var)?,
        }))
    }

    fn protocol(&self, var: &dyn Fn(&str) -> Option<String>) -> Result<ExportProtocol, String> {
        if let Some(protocol) = self.tracing_protocol {
            return Ok(match protocol {
                ProtocolArg::Grpc => ExportProtocol::Grpc,
                ProtocolArg::Http => ExportProtocol::Http,
            });
        }
        for name in
            ["TRACING_EXPORTER_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]
        {
            if let Some(text) = var(name) {
                return match text.trim() {
                    "grpc" => Ok(ExportProtocol::Grpc),
                    "http" | "http/protobuf" => Ok(ExportProtocol::Http),
                    "http/json" => Err(format!(
                        "{name}=http/json: OTLP/HTTP with JSON bodies is not \
                                                supported (use http/protobuf or grpc)"
                    )),
                    other => Err(format!("{name}={other:?} is not an OTLP protocol (grpc, http/protobuf)")),
                };
            }
        }
        Ok(ExportProtocol::Http)
    }

    fn endpoint(
        &self,
        protocol: ExportProtocol,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        let (endpoint, from) = if let Some(base) = &self.tracing_endpoint {
            (signal_endpoint(protocol, base), "--tracing-endpoint")
        } else if let Some(full) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            (full.trim().to_string(), "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        } else if let Some(base) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
            (signal_endpoint(protocol, &base), "OTEL_EXPORTER_OTLP_ENDPOINT")
        } else {
            let default = match protocol {
                ExportProtocol::Grpc => "http://localhost:4317".to_string(),
                ExportProtocol::Http => "http://localhost:4318/v1/traces".to_string(),
            };
            (default, "the default")
        };
        let uri: tonic::codegen::http::Uri =
            endpoint.parse().map_err(|e| format!("{from}: {endpoint:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http") if uri.host().is_some() => Ok(endpoint),
            Some("https") => Err(format!(
                "{from}: {endpoint:?}: TLS to the collector is not supported; send to a collector \
                 agent beside Tollgate over http://"
            )),
            _ => Err(format!("{from}: {endpoint:?} is not an http:// URL with a host")),
        }
    }

    fn sampling(&self, var: &dyn Fn(&str) -> Option<String>) -> Result<Sampling, String> {
        if let Some(ratio) = self.tracing_sample_ratio {
            return Ok(Sampling { parent_based: true, ratio });
        }
        if let Some(text) = var("TRACING_SAMPLING_RATE") {
            let ratio = ratio_of("TRACING_SAMPLING_RATE", &text)?;
            return Ok(Sampling { parent_based: true, ratio });
        }
        let arg = || match var("OTEL_TRACES_SAMPLER_ARG") {
            Some(text) => ratio_of("OTEL_TRACES_SAMPLER_ARG", &text),
            None => Ok(1.0),
        };
        let sampling = |parent_based, ratio| Ok(Sampling { parent_based, ratio });
        match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            None | Some("parentbased_always_on") => sampling(true, 1.0),
            Some("parentbased_always_off") => sampling(true, 0.0),
            Some("parentbased_traceidratio") => sampling(true, arg()?),
            Some("always_on") => sampling(false, 1.0),
            Some("always_off") => sampling(false, 0.0),
            Some("traceidratio") => sampling(false, arg()?),
            Some(other) => Err(format!(
                "OTEL_TRACES_SAMPLER={other:?} is not supported (always_on, always_off, traceidratio, \
                 parentbased_always_on, parentbased_always_off, parentbased_traceidratio)"
            )),
        }
    }
}

/// For HTTP, `/v1/traces` after a base URL (as OTEL_EXPORTER_OTLP_ENDPOINT is read); gRPC
/// takes the base as it is.
fn signal_endpoint(protocol: ExportProtocol, base: &str) -> String {
    let base = base.trim();
    match protocol {
        ExportProtocol::Grpc => base.to_string(),
        ExportProtocol::Http if base.ends_with("/v1/traces") => base.to_string(),
        ExportProtocol::Http => format!("{}/v1/traces", base.trim_end_matches('/')),
    }
}

fn ratio_of(name: &str, text: &str) -> Result<f64, String> {
    parse_share(text.trim()).map_err(|e| format!("{name}: {e}"))
}

/// The `OTEL_BSP_*` variables (milliseconds and counts), else their standard defaults.
fn batch(var: &dyn Fn(&str) -> Option<String>) -> Result<BatchSettings, String> {
    let number = |name: &str, default: u64| -> Result<u64, String> {
        match var(name) {
            None => Ok(default),
            Some(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}={text:?} is not a positive integer")),
        }
    };
    let defaults = BatchSettings::default();
    let queue_size = number("OTEL_BSP_MAX_QUEUE_SIZE", defaults.queue_size as u64)?;
    let batch_size = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", defaults.batch_size as u64)?;
    Ok(BatchSettings {
        queue_size: usize::try_from(queue_size.min(1 << 20)).unwrap_or(1 << 20),
        batch_size: usize::try_from(batch_size.min(queue_size)).unwrap_or(1),
        schedule_delay: Duration::from_millis(number(
            "OTEL_BSP_SCHEDULE_DELAY",
            defaults.schedule_delay.as_millis() as u64,
        )?),
        export_timeout: Duration::from_millis(number(
            "OTEL_BSP_EXPORT_TIMEOUT",
            defaults.export_timeout.as_millis() as u64,
        )?),
    })
}

/// A random 128-bit id in hex (the peer uses a random UUID when none is given).
fn random_instance_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests;
