//! The compose demo (`examples/compose/docker-compose.yml`) as data: its services, the
//! files they mount, and Tollgate's command line, so the Docker-free topology of these
//! tests runs what the demo runs.

use std::path::PathBuf;

use serde_yaml::Value;

use super::yaml::{at, load, repo_path, seq_at};

pub const COMPOSE_FILE: &str = "examples/compose/docker-compose.yml";

/// The parsed compose file.
pub fn compose() -> Value {
    load(COMPOSE_FILE)
}

/// `services.<name>`.
pub fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    at(compose, &format!("services.{name}"))
}

/// The host path mounted at `target` in `service` (relative to the compose file's folder).
pub fn mount_source(compose: &Value, service_name: &str, target: &str) -> PathBuf {
    let volumes = seq_at(service(compose, service_name), "volumes");
    let source = volumes
        .iter()
        .filter_map(Value::as_str)
        .find_map(|v| {
            let mut parts = v.split(':');
            let (source, dest) = (parts.next()?, parts.next()?);
            (dest == target).then_some(source)
        })
        .unwrap_or_else(|| panic!("{service_name} mounts nothing at {target}"));
    let base = repo_path(COMPOSE_FILE).parent().expect("compose folder").to_path_buf();
    base.join(source)
}

/// The service's `command`, as a list of strings.
pub fn command(compose: &Value, service_name: &str) -> Vec<String> {
    seq_at(service(compose, service_name), "command")
        .iter()
        .map(|v| {
            v.as_str().unwrap_or_else(|| panic!("{service_name}: non-string argument {v:?}")).to_string()
        })
        .collect()
}

/// The value following `flag` in a command line.
pub fn flag_value<'a>(command: &'a [String], flag: &str) -> &'a str {
    let i = command.iter().position(|a| a == flag).unwrap_or_else(|| panic!("no {flag} in {command:?}"));
    command.get(i + 1).unwrap_or_else(|| panic!("{flag} has no value in {command:?}"))
}

/// `command` with each `(flag, value)` replaced, or appended when the flag is absent.
pub fn with_flags(command: &[String], overrides: &[(&str, String)]) -> Vec<String> {
    let mut out = command.to_vec();
    for (flag, value) in overrides {
        match out.iter().position(|a| a == flag) {
            Some(i) if i + 1 < out.len() => out[i + 1] = value.clone(),
            _ => out.extend([flag.to_string(), value.clone()]),
        }
    }
    out
}

/// `command` without `flag` and its value.
pub fn without_flag(command: &[String], flag: &str) -> Vec<String> {
    let mut out = command.to_vec();
    if let Some(i) = out.iter().position(|a| a == flag) {
        out.drain(i..(i + 2).min(out.len()));
    }
    out
}
