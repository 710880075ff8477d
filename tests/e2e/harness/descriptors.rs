//! Which descriptors an Envoy config sends, and whether a policy has rules for them: the
//! link between `rate_limits` actions and the YAML policies, checked without running Envoy.

use std::collections::HashMap;
use std::path::Path;

use serde_yaml::Value;

use super::envoy::{HCM, RATELIMIT};
use super::yaml::{at, find, load_file, seq_at, str_at};

/// The keys of the descriptor one `rate_limits` entry builds, in order.
pub fn action_keys(rate_limit: &Value) -> Vec<String> {
    seq_at(rate_limit, "actions").iter().map(action_key).collect()
}

fn action_key(action: &Value) -> String {
    let mapping = action.as_mapping().expect("an action is a mapping");
    let (kind, body) = mapping.iter().next().expect("an action has one field");
    let own_key =
        |default: &str| body.get("descriptor_key").and_then(Value::as_str).unwrap_or(default).to_string();
    match kind.as_str().expect("action name") {
        "request_headers" => str_at(body, "descriptor_key").to_string(),
        "remote_address" => "remote_address".to_string(),
        "generic_key" => own_key("generic_key"),
        "header_value_match" => own_key("header_match"),
        "source_cluster" | "destination_cluster" => kind.as_str().unwrap_or_default().to_string(),
        other => panic!("action `{other}` is not known to this test: teach `action_key` its key"),
    }
}

/// Whether a policy's descriptor tree has a node for each key in turn (values ignored).
pub fn policy_reaches(descriptors: &[Value], keys: &[String]) -> bool {
    let Some((first, rest)) = keys.split_first() else { return true };
    descriptors.iter().filter(|d| d.get("key").and_then(Value::as_str) == Some(first.as_str())).any(|d| {
        rest.is_empty()
            || d.get("descriptors")
                .and_then(Value::as_sequence)
                .is_some_and(|below| policy_reaches(below, rest))
    })
}

/// Asserts every `(domain, keys)` has a domain among `policies` whose tree reaches `keys`.
pub fn assert_policies_cover(sent: &[(String, Vec<String>)], policies: &HashMap<String, Value>) {
    assert!(!sent.is_empty(), "no rate_limits actions found");
    for (domain, keys) in sent {
        let policy = policies.get(domain).unwrap_or_else(|| panic!("no policy for domain `{domain}`"));
        assert!(
            policy_reaches(seq_at(policy, "descriptors"), keys),
            "domain `{domain}` has no rule for the descriptor keys {keys:?} Envoy sends"
        );
    }
}

/// The policy documents of a directory (`*.yaml` / `*.yml`), by domain.
pub fn policies_in(dir: &Path) -> HashMap<String, Value> {
    let mut policies = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            let policy = load_file(&path);
            policies.insert(str_at(&policy, "domain").to_string(), policy);
        }
    }
    policies
}

/// `(domain, keys)` of every `rate_limits` entry in a static Envoy bootstrap: virtual
/// host entries go to the filter's domain, route entries to the route's domain override.
pub fn sent_by_bootstrap(bootstrap: &Value) -> Vec<(String, Vec<String>)> {
    let mut sent = Vec::new();
    for listener in seq_at(bootstrap, "static_resources.listeners") {
        for chain in seq_at(listener, "filter_chains") {
            let hcm = at(find(seq_at(chain, "filters"), "name", HCM), "typed_config");
            let filter = find(seq_at(hcm, "http_filters"), "name", RATELIMIT);
            let domain = str_at(filter, "typed_config.domain");
            for vhost in seq_at(hcm, "route_config.virtual_hosts") {
                sent.extend(entries(vhost.get("rate_limits"), domain));
                for route in seq_at(vhost, "routes") {
                    let own = route.get("typed_per_filter_config").and_then(|c| c.get(RATELIMIT));
                    let domain = own.and_then(|c| c.get("domain")).and_then(Value::as_str).unwrap_or(domain);
                    sent.extend(entries(route.get("route").and_then(|r| r.get("rate_limits")), domain));
                }
            }
        }
    }
    sent
}

/// `(domain, keys)` of each entry of an optional `rate_limits` list.
pub fn entries(rate_limits: Option<&Value>, domain: &str) -> Vec<(String, Vec<String>)> {
    let list = rate_limits.and_then(Value::as_sequence).map(Vec::as_slice).unwrap_or_default();
    list.iter().map(|entry| (domain.to_string(), action_keys(entry))).collect()
}
