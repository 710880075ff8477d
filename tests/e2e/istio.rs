//! The Istio / Kubernetes manifests in `envoy/istio/`, checked statically (no cluster
//! runs here): every document parses; the references between them agree (ports, probe
//! paths, Service and cluster names, FQDNs, ConfigMap name, keys and mount path, domains,
//! descriptor keys, drain vs grace period, image tag); the embedded policies pass
//! `tollgate check`; the EnvoyFilter patches load in a real Envoy; and the Deployment's
//! container command line and environment start the real binary to readiness.

use std::collections::HashMap;
use std::path::Path;

use serde_yaml::Value;

use crate::harness::descriptors::{assert_policies_cover, entries, policies_in};
use crate::harness::envoy::{self, HCM};
use crate::harness::tollgate::{self, Tollgate};
use crate::harness::yaml::{at, find, load_all, repo_path, seq_at, str_at};
use crate::harness::{free_loopback, yaml};

/// Every document of every `*.yaml` in `envoy/istio/`.
struct Manifests(Vec<Value>);

impl Manifests {
    fn load() -> Manifests {
        let dir = repo_path("envoy/istio");
        let mut files: Vec<_> =
            std::fs::read_dir(&dir).expect("envoy/istio").map(|e| e.expect("entry").path()).collect();
        files.sort();
        let docs: Vec<Value> = files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .flat_map(|p| load_all(p))
            .collect();
        assert!(
            docs.len() >= 7,
            "expected the Tollgate, Redis and EnvoyFilter resources, got {}",
            docs.len()
        );
        Manifests(docs)
    }

    fn all(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|d| d.get("kind").and_then(Value::as_str) == Some(kind)).collect()
    }

    fn one(&self, kind: &str, name: &str) -> &Value {
        let found: Vec<_> =
            self.all(kind).into_iter().filter(|d| str_at(d, "metadata.name") == name).collect();
        assert_eq!(found.len(), 1, "{kind}/{name}: expected exactly one");
        found[0]
    }

    /// The ConfigMap holding the policies, as (file name, YAML text).
    fn policies(&self) -> Vec<(String, String)> {
        let map = at(self.one("ConfigMap", "tollgate-policies"), "data").as_mapping().expect("data");
        map.iter().map(|(k, v)| (k.as_str().expect("key").into(), v.as_str().expect("text").into())).collect()
    }
}

fn container(deployment: &Value) -> &Value {
    at(deployment, "spec.template.spec.containers.0")
}

fn env<'a>(container: &'a Value, name: &str) -> &'a str {
    str_at(find(seq_at(container, "env"), "name", name), "value")
}

fn port_number(addr: &str) -> u64 {
    addr.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("no port in {addr}"))
}

fn fqdn(service: &Value) -> String {
    format!(
        "{}.{}.svc.cluster.local",
        str_at(service, "metadata.name"),
        str_at(service, "metadata.namespace")
    )
}

#[test]
fn every_manifest_has_a_kind_a_name_and_a_namespace() {
    for doc in &Manifests::load().0 {
        let (kind, name) = (str_at(doc, "kind"), str_at(doc, "metadata.name"));
        assert!(doc.get("apiVersion").is_some(), "{kind}/{name}: no apiVersion");
        if kind != "Namespace" {
            assert!(
                doc.get("metadata").and_then(|m| m.get("namespace")).is_some(),
                "{kind}/{name}: no namespace"
            );
        }
    }
}

#[test]
fn the_deployment_listens_where_its_ports_service_and_probes_say() {
    let manifests = Manifests::load();
    let deployment = manifests.one("Deployment", "tollgate");
    let c = container(deployment);
    let ports = seq_at(c, "ports");
    let port = |name: &str| at(find(ports, "name", name), "containerPort").as_u64().expect("port");
    for (variable, name) in [("TOLLGATE_GRPC_ADDR", "grpc-ratelimit"), ("TOLLGATE_ADMIN_ADDR", "http-admin")]
    {
        let addr = env(c, variable);
        assert!(addr.starts_with("0.0.0.0:"), "{variable}={addr}: unreachable from outside the pod");
        assert_eq!(port_number(addr), port(name), "{variable} vs container port {name}");
    }
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(str_at(c, &format!("{probe}.httpGet.path")), path);
        assert_eq!(str_at(c, &format!("{probe}.httpGet.port")), "http-admin", "{probe} port");
    }
    let labels = at(deployment, "spec.template.metadata.labels");
    assert_eq!(at(deployment, "spec.selector.matchLabels"), labels, "selector vs pod labels");
    let service = manifests.one("Service", "tollgate");
    assert_eq!(at(service, "spec.selector"), labels, "Service selects other pods");
    let grpc = find(seq_at(service, "spec.ports"), "name", "grpc-ratelimit");
    assert_eq!(str_at(grpc, "appProtocol"), "grpc", "Istio must see gRPC (HTTP/2)");
    assert_eq!(str_at(grpc, "targetPort"), "grpc-ratelimit");
    let image = str_at(c, "image");
    assert!(image.ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))), "image {image} is not this version");
}

#[test]
fn the_grace_period_covers_the_drain() {
    let manifests = Manifests::load();
    let deployment = manifests.one("Deployment", "tollgate");
    let drain: u64 = env(container(deployment), "TOLLGATE_DRAIN_SECONDS").parse().expect("drain seconds");
    let grace = at(deployment, "spec.template.spec.terminationGracePeriodSeconds").as_u64().expect("grace");
    assert_eq!(drain, 5);
    // The drain, then in-flight calls get up to the drain period again (src/app.rs).
    assert!(grace > 2 * drain, "grace {grace}s: SIGKILL before a {drain}s drain and its in-flight calls end");
}

#[test]
fn the_redis_url_names_the_redis_service_with_its_password() {
    let manifests = Manifests::load();
    let tollgate = container(manifests.one("Deployment", "tollgate"));
    let url = env(tollgate, "TOLLGATE_REDIS_URL");
    let redis = manifests.one("Service", "tollgate-redis");
    let port = at(find(seq_at(redis, "spec.ports"), "name", "tcp-redis"), "port").as_u64().expect("port");
    assert_eq!(url, format!("redis://:$(REDIS_PASSWORD)@{}:{port}/", fqdn(redis)));
    let pods = at(manifests.one("Deployment", "tollgate-redis"), "spec.template.metadata.labels");
    assert_eq!(at(redis, "spec.selector"), pods);
    // $(REDIS_PASSWORD) expands only from a variable defined before it, from the Secret
    // Redis itself requires.
    let vars = seq_at(tollgate, "env");
    let index = |name: &str| vars.iter().position(|v| str_at(v, "name") == name).expect(name);
    assert!(index("REDIS_PASSWORD") < index("TOLLGATE_REDIS_URL"));
    let secret = |c: &Value| {
        let var = find(seq_at(c, "env"), "name", "REDIS_PASSWORD");
        (
            str_at(var, "valueFrom.secretKeyRef.name").to_string(),
            str_at(var, "valueFrom.secretKeyRef.key").to_string(),
        )
    };
    let redis_container = container(manifests.one("Deployment", "tollgate-redis"));
    assert_eq!(secret(tollgate), secret(redis_container));
    assert!(at(manifests.one("Secret", "tollgate-redis-auth"), "stringData").get("password").is_some());
}

#[test]
fn the_sample_redis_requires_a_password_and_caps_its_memory() {
    let manifests = Manifests::load();
    let redis = container(manifests.one("Deployment", "tollgate-redis"));
    let args: Vec<&str> = seq_at(redis, "args").iter().map(|a| a.as_str().expect("arg")).collect();
    let after = |flag: &str| {
        args.iter().position(|a| *a == flag).map(|i| args[i + 1]).unwrap_or_else(|| panic!("{flag}"))
    };
    assert_eq!(after("--requirepass"), "$(REDIS_PASSWORD)");
    assert_eq!(
        after("--maxmemory-policy"),
        "volatile-ttl",
        "evicts the buckets nearest to full, never fails writes"
    );
    let cap: u64 = after("--maxmemory").trim_end_matches("mb").parse().expect("maxmemory in mb");
    let limit: u64 =
        str_at(redis, "resources.limits.memory").trim_end_matches("Mi").parse().expect("limit in Mi");
    assert!(
        cap * 1_000_000 < limit * 1_048_576 * 8 / 10,
        "maxmemory {cap}mb leaves headroom under {limit}Mi"
    );
    // Only Tollgate's pods reach it.
    let policy = manifests.one("NetworkPolicy", "tollgate-redis");
    assert_eq!(
        at(policy, "spec.podSelector.matchLabels"),
        at(manifests.one("Deployment", "tollgate-redis"), "spec.template.metadata.labels")
    );
    let rules = seq_at(policy, "spec.ingress");
    assert_eq!(rules.len(), 1);
    let from = seq_at(&rules[0], "from");
    assert_eq!(from.len(), 1);
    assert_eq!(
        at(&from[0], "podSelector.matchLabels"),
        at(manifests.one("Deployment", "tollgate"), "spec.template.metadata.labels")
    );
}

/// The namespace a NetworkPolicy peer selects by its well-known name label.
fn namespace_of(peer: &Value) -> &str {
    let labels = at(peer, "namespaceSelector.matchLabels");
    labels.get("kubernetes.io/metadata.name").and_then(Value::as_str).expect("selects a namespace by name")
}

/// `(namespace, pod labels)` of the Envoys that call Tollgate: the EnvoyFilters' targets.
fn callers(manifests: &Manifests) -> Vec<(String, Value)> {
    manifests
        .all("EnvoyFilter")
        .into_iter()
        .map(|f| (str_at(f, "metadata.namespace").to_string(), at(f, "spec.workloadSelector.labels").clone()))
        .collect()
}

#[test]
fn network_policies_admit_grpc_from_the_callers_and_admin_from_monitoring_only() {
    let manifests = Manifests::load();
    let policy = manifests.one("NetworkPolicy", "tollgate");
    let deployment = manifests.one("Deployment", "tollgate");
    assert_eq!(at(policy, "spec.podSelector.matchLabels"), at(deployment, "spec.template.metadata.labels"));
    let port_of = |name: &str| {
        at(find(seq_at(container(deployment), "ports"), "name", name), "containerPort")
            .as_u64()
            .expect("port")
    };
    let rules = seq_at(policy, "spec.ingress");
    let rule_for = |port: u64| -> &Value {
        let found: Vec<&Value> = rules
            .iter()
            .filter(|r| seq_at(r, "ports").iter().any(|p| at(p, "port").as_u64() == Some(port)))
            .collect();
        assert_eq!(found.len(), 1, "one rule for port {port}");
        found[0]
    };
    // gRPC: exactly the gateway and the sidecar workloads (namespace and pod labels).
    let grpc = rule_for(port_of("grpc-ratelimit"));
    let mut admitted: Vec<(String, Value)> = seq_at(grpc, "from")
        .iter()
        .map(|peer| (namespace_of(peer).to_string(), at(peer, "podSelector.matchLabels").clone()))
        .collect();
    let mut expected = callers(&manifests);
    let key = |(ns, labels): &(String, Value)| format!("{ns}/{labels:?}");
    admitted.sort_by_key(key);
    expected.sort_by_key(key);
    assert_eq!(admitted, expected, "gRPC is open to exactly the Envoys the EnvoyFilters configure");
    // Admin: only the monitoring namespace, any pod there.
    let admin = rule_for(port_of("http-admin"));
    let from = seq_at(admin, "from");
    assert_eq!(from.len(), 1);
    assert_eq!(namespace_of(&from[0]), "monitoring");
    assert!(from[0].get("podSelector").is_none());
    assert_eq!(rules.len(), 2, "no other way in");
}

#[test]
fn post_admin_endpoints_need_the_token_from_a_secret() {
    let manifests = Manifests::load();
    let deployment = manifests.one("Deployment", "tollgate");
    let file = env(container(deployment), "TOLLGATE_ADMIN_TOKEN_FILE");
    let (dir, name) = file.rsplit_once('/').expect("a path");
    let mount = find(seq_at(container(deployment), "volumeMounts"), "mountPath", dir);
    let volume = find(seq_at(deployment, "spec.template.spec.volumes"), "name", str_at(mount, "name"));
    let secret = manifests.one("Secret", str_at(volume, "secret.secretName"));
    assert!(at(secret, "stringData").get(name).is_some(), "the Secret holds the {name} key");
}

#[test]
fn the_policies_configmap_is_mounted_where_tollgate_reads_and_passes_check() {
    let manifests = Manifests::load();
    let deployment = manifests.one("Deployment", "tollgate");
    let volume = find(seq_at(deployment, "spec.template.spec.volumes"), "name", "policies");
    assert_eq!(str_at(volume, "configMap.name"), "tollgate-policies");
    let mount = find(seq_at(container(deployment), "volumeMounts"), "name", "policies");
    assert_eq!(str_at(mount, "mountPath"), env(container(deployment), "TOLLGATE_CONFIG"));
    let dir = tempfile::tempdir().expect("tempdir");
    write_policies(&manifests, dir.path());
    tollgate::check(dir.path());
    let edge = manifests.policies().into_iter().find(|(k, _)| k == "edge.yaml").expect("edge.yaml key");
    let shipped = std::fs::read_to_string(repo_path("config/edge.yaml")).expect("config/edge.yaml");
    assert_eq!(edge.1, shipped, "the ConfigMap's edge.yaml differs from config/edge.yaml");
}

fn write_policies(manifests: &Manifests, dir: &Path) {
    for (key, text) in manifests.policies() {
        assert!(key.ends_with(".yaml") || key.ends_with(".yml"), "key {key}: Tollgate would not load it");
        std::fs::write(dir.join(&key), text).expect("write policy");
    }
}

/// The `patch.value` of an EnvoyFilter's config patch for `apply_to`.
fn patch<'a>(filter: &'a Value, apply_to: &str) -> &'a Value {
    let patches = seq_at(filter, "spec.configPatches");
    at(find(patches, "applyTo", apply_to), "patch.value")
}

#[test]
fn the_envoy_filters_call_the_tollgate_service_in_a_configured_domain() {
    let manifests = Manifests::load();
    let service = manifests.one("Service", "tollgate");
    let grpc =
        at(find(seq_at(service, "spec.ports"), "name", "grpc-ratelimit"), "port").as_u64().expect("port");
    let dir = tempfile::tempdir().expect("tempdir");
    write_policies(&manifests, dir.path());
    let policies = policies_in(dir.path());
    let filters = manifests.all("EnvoyFilter");
    assert_eq!(filters.len(), 2, "one for the gateway, one for a sidecar");
    for filter in filters {
        let http_filter = patch(filter, "HTTP_FILTER");
        assert_eq!(str_at(http_filter, "name"), envoy::RATELIMIT);
        let config = at(http_filter, "typed_config");
        let grpc_service = at(config, "rate_limit_service.grpc_service.envoy_grpc");
        assert_eq!(str_at(grpc_service, "cluster_name"), format!("outbound|{grpc}||{}", fqdn(service)));
        assert_eq!(str_at(grpc_service, "authority"), fqdn(service));
        assert_eq!(str_at(config, "rate_limit_service.transport_api_version"), "V3");
        let sent = entries(patch(filter, "VIRTUAL_HOST").get("rate_limits"), str_at(config, "domain"));
        assert_policies_cover(&sent, &policies);
    }
    let contexts: Vec<&str> = manifests
        .all("EnvoyFilter")
        .iter()
        .map(|f| str_at(find(seq_at(f, "spec.configPatches"), "applyTo", "HTTP_FILTER"), "match.context"))
        .collect();
    assert_eq!(contexts, ["GATEWAY", "SIDECAR_INBOUND"]);
}

#[test]
fn the_envoy_filter_patches_load_in_a_real_envoy() {
    let dir = tempfile::tempdir().expect("tempdir");
    for filter in Manifests::load().all("EnvoyFilter") {
        let name = str_at(filter, "metadata.name");
        let bootstrap = bootstrap_with(patch(filter, "HTTP_FILTER"), patch(filter, "VIRTUAL_HOST"));
        if let Err(output) = envoy::validate_value(&bootstrap, dir.path(), &format!("{name}.yaml")) {
            panic!("EnvoyFilter {name}: Envoy rejects its patches:\n{output}");
        }
    }
}

/// A minimal static bootstrap: one listener whose HCM has the patched filter before the
/// router and a virtual host merged with the patch, plus the cluster the filter names.
fn bootstrap_with(http_filter: &Value, vhost_patch: &Value) -> Value {
    let cluster = str_at(http_filter, "typed_config.rate_limit_service.grpc_service.envoy_grpc.cluster_name");
    let text = format!(
        r#"
static_resources:
  listeners:
    - name: patched
      address: {{ socket_address: {{ address: 127.0.0.1, port_value: 10000 }} }}
      filter_chains: [{{ filters: [{{ name: {HCM}, typed_config: {{
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager,
        stat_prefix: patched,
        route_config: {{ virtual_hosts: [{{ name: app, domains: ["*"],
          routes: [{{ match: {{ prefix: / }}, route: {{ cluster: app }} }}] }}] }},
        http_filters: [{{ name: envoy.filters.http.router, typed_config: {{
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }} }}] }} }}] }}]
  clusters:
    - {{ name: app, load_assignment: {{ cluster_name: app }} }}
    - name: "{cluster}"
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {{ http2_protocol_options: {{}} }}
      load_assignment: {{ cluster_name: "{cluster}" }}
"#
    );
    let mut bootstrap: Value = serde_yaml::from_str(&text).expect("bootstrap template");
    let hcm =
        yaml::at_mut(&mut bootstrap, "static_resources.listeners.0.filter_chains.0.filters.0.typed_config");
    let filters = yaml::at_mut(hcm, "http_filters").as_sequence_mut().expect("http_filters");
    filters.insert(0, http_filter.clone());
    let vhost = yaml::at_mut(hcm, "route_config.virtual_hosts.0").as_mapping_mut().expect("vhost");
    for (key, value) in vhost_patch.as_mapping().expect("MERGE value") {
        vhost.insert(key.clone(), value.clone());
    }
    bootstrap
}

#[test]
fn the_deployments_container_starts_the_real_binary_to_readiness() {
    let manifests = Manifests::load();
    let c = container(manifests.one("Deployment", "tollgate"));
    let args: Vec<String> = seq_at(c, "args").iter().map(|a| a.as_str().expect("arg").to_string()).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies).expect("policy dir");
    write_policies(&manifests, &policies);
    let admin = free_loopback();
    // Only what cannot be the same here: paths and addresses. Redis is not running, which
    // Tollgate must accept (it serves by the failure policies until Redis comes).
    // The admin token file the Secret volume would hold.
    let token_file = dir.path().join("admin-token");
    let token_secret = manifests.one("Secret", "tollgate-admin-token");
    std::fs::write(&token_file, str_at(token_secret, "stringData.token")).expect("token file");
    let local: HashMap<&str, String> = HashMap::from([
        ("TOLLGATE_CONFIG", policies.display().to_string()),
        ("TOLLGATE_GRPC_ADDR", free_loopback().to_string()),
        ("TOLLGATE_ADMIN_ADDR", admin.to_string()),
        ("TOLLGATE_REDIS_URL", format!("redis://{}/", free_loopback())),
        ("TOLLGATE_ADMIN_TOKEN_FILE", token_file.display().to_string()),
    ]);
    // A value, or what the kubelet reads from the Secret a `secretKeyRef` names.
    let value_of = |e: &Value| -> String {
        match e.get("value") {
            Some(v) => v.as_str().expect("a string value").to_string(),
            None => {
                let secret = manifests.one("Secret", str_at(e, "valueFrom.secretKeyRef.name"));
                let data = at(secret, "stringData");
                let key = str_at(e, "valueFrom.secretKeyRef.key");
                data.get(key).and_then(Value::as_str).expect("the Secret holds the key").to_string()
            }
        }
    };
    let env: Vec<(String, String)> = seq_at(c, "env")
        .iter()
        .map(|e| (str_at(e, "name").to_string(), value_of(e)))
        .map(|(k, v)| (k.clone(), local.get(k.as_str()).cloned().unwrap_or(v)))
        .collect();
    assert!(env.iter().any(|(k, v)| k == "TOLLGATE_STORE" && v == "redis"));
    let _tollgate = Tollgate::serve(&args, &env, admin, dir.path());
}
