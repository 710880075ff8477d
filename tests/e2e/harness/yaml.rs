//! Reading the shipped YAML (Envoy bootstrap, compose file, Kubernetes manifests) as
//! `serde_yaml::Value`, with lookups that panic naming what is missing, so a renamed field
//! fails the test with a readable message instead of passing vacuously.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::Value;

/// The repository root (where Cargo.toml is).
pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// One YAML document from a file of the repository.
pub fn load(relative: &str) -> Value {
    load_file(&repo_path(relative))
}

/// One YAML document from a file.
pub fn load_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}

/// Every document of a multi-document YAML file (empty documents skipped).
pub fn load_all(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("parse {}: {e}", path.display())))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// `value[k1][k2]...` where each step is a mapping key or a sequence index.
pub fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    let mut current = value;
    for step in path.split('.') {
        let next = match step.parse::<usize>() {
            Ok(i) => current.get(i),
            Err(_) => current.get(step),
        };
        current = next.unwrap_or_else(|| panic!("no `{step}` (of `{path}`) in:\n{}", dump(current)));
    }
    current
}

/// Mutable `at`.
pub fn at_mut<'a>(value: &'a mut Value, path: &str) -> &'a mut Value {
    let mut current = value;
    for step in path.split('.') {
        let shown = dump(current);
        let next = match step.parse::<usize>() {
            Ok(i) => current.get_mut(i),
            Err(_) => current.get_mut(step),
        };
        current = next.unwrap_or_else(|| panic!("no `{step}` (of `{path}`) in:\n{shown}"));
    }
    current
}

/// `at(value, path)` as a string.
pub fn str_at<'a>(value: &'a Value, path: &str) -> &'a str {
    at(value, path).as_str().unwrap_or_else(|| panic!("`{path}` is not a string"))
}

/// `at(value, path)` as a sequence.
pub fn seq_at<'a>(value: &'a Value, path: &str) -> &'a Vec<Value> {
    at(value, path).as_sequence().unwrap_or_else(|| panic!("`{path}` is not a list"))
}

/// The element of a sequence whose `field` is `name` (e.g. a cluster by `name`).
pub fn find<'a>(items: &'a [Value], field: &str, name: &str) -> &'a Value {
    items
        .iter()
        .find(|item| item.get(field).and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no element with {field}: {name}"))
}

/// Mutable `find`.
pub fn find_mut<'a>(items: &'a mut [Value], field: &str, name: &str) -> &'a mut Value {
    items
        .iter_mut()
        .find(|item| item.get(field).and_then(Value::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no element with {field}: {name}"))
}

/// `{ address: <ip>, port_value: <port> }` as Envoy writes a socket address.
pub fn socket_address(addr: std::net::SocketAddr) -> Value {
    serde_yaml::from_str(&format!("{{address: \"{}\", port_value: {}}}", addr.ip(), addr.port()))
        .expect("socket address yaml")
}

/// `value` as YAML text, for failure messages and files.
pub fn dump(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}
