use std::collections::HashMap;
use std::time::Duration;

use clap::Parser;

use crate::telemetry::trace::{ExportProtocol, Sampling, TraceSettings};

use super::TracingFlags;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    flags: TracingFlags,
}

/// The settings of `args` with the variables `env` (and no other).
fn chosen(args: &[&str], env: &[(&str, &str)]) -> Result<Option<TraceSettings>, String> {
    let cli = Cli::try_parse_from(std::iter::once("tollgate").chain(args.iter().copied())).expect("flags");
    let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    cli.flags.choose(&|name| env.get(name).cloned())
}

fn on(args: &[&str], env: &[(&str, &str)]) -> TraceSettings {
    chosen(args, env).expect("valid").expect("tracing on")
}

#[test]
fn off_unless_asked_for_an_endpoint_alone_turns_nothing_on() {
    assert_eq!(chosen(&[], &[]), Ok(None));
    let endpoint_only =
        [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"), ("TRACING_SAMPLING_RATE", "1")];
    assert_eq!(chosen(&[], &endpoint_only), Ok(None));
    assert_eq!(chosen(&["--tracing-endpoint", "http://collector:4318"], &[]), Ok(None));
    assert_eq!(chosen(&[], &[("TRACING_ENABLED", "false")]), Ok(None));
    assert_eq!(chosen(&["--tracing=false"], &[("TRACING_ENABLED", "true")]), Ok(None), "the flag wins");
    assert!(chosen(&[], &[("TRACING_ENABLED", "yes")]).unwrap_err().contains("TRACING_ENABLED"));
}

#[test]
fn defaults_are_the_peers_http_to_localhost_every_trace_parent_based() {
    let settings = on(&["--tracing"], &[]);
    assert_eq!(settings.protocol, ExportProtocol::Http);
    assert_eq!(settings.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(settings.sampling, Sampling { parent_based: true, ratio: 1.0 });
    assert_eq!(settings.service_name, "tollgate");
    assert_eq!(settings.service_namespace, None);
    assert_eq!(settings.service_instance_id.len(), 32);
    assert!(!settings.descriptor_values);
    assert_eq!(settings.batch.queue_size, 2048);
    assert_eq!(settings.batch.batch_size, 512);
    assert_eq!(settings.batch.schedule_delay, Duration::from_secs(5));
    let grpc = on(&["--tracing", "--tracing-protocol", "grpc"], &[]);
    assert_eq!(grpc.endpoint, "http://localhost:4317");
}

#[test]
fn envoy_gateways_tracing_variables_map_onto_the_settings() {
    let settings = on(
        &[],
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-5d8f7c9b6-x2x7q"),
            ("TRACING_SAMPLING_RATE", "0.6"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://trace-collector.envoy-gateway-system.svc.cluster.local:4318",
            ),
        ],
    );
    assert_eq!(settings.protocol, ExportProtocol::Http);
    assert_eq!(
        settings.endpoint,
        "http://trace-collector.envoy-gateway-system.svc.cluster.local:4318/v1/traces"
    );
    assert_eq!(settings.sampling, Sampling { parent_based: true, ratio: 0.6 });
    assert_eq!(settings.service_name, "envoy-ratelimit");
    assert_eq!(settings.service_namespace.as_deref(), Some("envoy-gateway-system"));
    assert_eq!(settings.service_instance_id, "envoy-ratelimit-5d8f7c9b6-x2x7q");
}

#[test]
fn protocol_and_endpoint_precedence() {
    let grpc = on(
        &[],
        &[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ],
    );
    assert_eq!(grpc.protocol, ExportProtocol::Grpc);
    let standard = on(
        &["--tracing"],
        &[("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")],
    );
    assert_eq!((standard.protocol, standard.endpoint.as_str()), (ExportProtocol::Grpc, "http://c:4317"));
    let flag = on(&["--tracing", "--tracing-protocol", "http"], &[("TRACING_EXPORTER_PROTOCOL", "grpc")]);
    assert_eq!(flag.protocol, ExportProtocol::Http);
    // The signal's own endpoint is taken as given; the flag wins over both.
    let full = on(
        &["--tracing"],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://d:4318"),
        ],
    );
    assert_eq!(full.endpoint, "http://c:4318/custom");
    let flag = on(
        &["--tracing", "--tracing-endpoint", "http://e:4318/"],
        &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:1")],
    );
    assert_eq!(flag.endpoint, "http://e:4318/v1/traces");
}

#[test]
fn bad_values_are_refused_with_their_name() {
    let refused = |args: &[&str], env: &[(&str, &str)]| chosen(args, env).expect_err("refused");
    assert!(refused(&["--tracing"], &[("TRACING_EXPORTER_PROTOCOL", "http/json")]).contains("JSON"));
    assert!(refused(&["--tracing"], &[("OTEL_EXPORTER_OTLP_PROTOCOL", "udp")])
        .contains("OTEL_EXPORTER_OTLP_PROTOCOL"));
    assert!(refused(&["--tracing"], &[("TRACING_SAMPLING_RATE", "2")]).contains("TRACING_SAMPLING_RATE"));
    assert!(
        refused(&["--tracing"], &[("OTEL_TRACES_SAMPLER", "jaeger_remote")]).contains("OTEL_TRACES_SAMPLER")
    );
    assert!(refused(&["--tracing", "--tracing-endpoint", "https://c:4318"], &[]).contains("TLS"));
    assert!(
        refused(&["--tracing", "--tracing-endpoint", "collector:4318"], &[]).contains("--tracing-endpoint")
    );
    assert!(refused(&["--tracing"], &[("OTEL_BSP_MAX_QUEUE_SIZE", "0")]).contains("OTEL_BSP_MAX_QUEUE_SIZE"));
}

#[test]
fn standard_samplers_are_read() {
    let sampler = |name: &str, arg: Option<&str>| {
        let mut env = vec![("OTEL_TRACES_SAMPLER", name)];
        env.extend(arg.map(|a| ("OTEL_TRACES_SAMPLER_ARG", a)));
        on(&["--tracing"], &env).sampling
    };
    assert_eq!(sampler("always_off", None), Sampling { parent_based: false, ratio: 0.0 });
    assert_eq!(sampler("traceidratio", Some("0.25")), Sampling { parent_based: false, ratio: 0.25 });
    assert_eq!(
        sampler("parentbased_traceidratio", Some("0.01")),
        Sampling { parent_based: true, ratio: 0.01 }
    );
    assert_eq!(sampler("parentbased_always_off", None), Sampling { parent_based: true, ratio: 0.0 });
    // The peer's variable and the flag win over the standard one.
    let peer = on(&["--tracing"], &[("TRACING_SAMPLING_RATE", "0.5"), ("OTEL_TRACES_SAMPLER", "always_off")]);
    assert_eq!(peer.sampling.ratio, 0.5);
    let flag = on(&["--tracing", "--tracing-sample-ratio", "0.1"], &[("TRACING_SAMPLING_RATE", "0.5")]);
    assert_eq!(flag.sampling, Sampling { parent_based: true, ratio: 0.1 });
}

#[test]
fn service_name_and_batch_shape_from_the_standard_variables() {
    let settings = on(
        &["--tracing"],
        &[
            ("OTEL_SERVICE_NAME", "edge-rls"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64"),
        ],
    );
    assert_eq!(settings.service_name, "edge-rls");
    assert_eq!(settings.batch.schedule_delay, Duration::from_millis(100));
    assert_eq!(settings.batch.batch_size, 64);
    let peer = on(&["--tracing"], &[("OTEL_SERVICE_NAME", "edge-rls"), ("TRACING_SERVICE_NAME", "rl")]);
    assert_eq!(peer.service_name, "rl");
}
