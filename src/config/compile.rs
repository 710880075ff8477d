//! Validation and compilation: raw YAML structs of every file → one immutable `Snapshot`.
//!
//! Collects *all* problems of all files (never stops at the first), each naming the file,
//! the rule path and the field, with a line from the parser or from the position scan.
//! Pure: takes file names and contents, does no I/O (that is `loader`), and builds the
//! matcher tree through `matcher` without knowing how it matches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::algorithm::Algorithm;

use super::domains::{self, Parsed};
use super::error::{ConfigError, ConfigErrors};
use super::matcher::{is_wildcard, Branch, Node, Tree};
use super::model::{ChargeMode, Consistency, Domain, FailureMode, HashTag, Snapshot};
use super::options::LoadOptions;
use super::raw::{Positions, RawDescriptor};
use super::rule::{Level, Rule};
use super::yaml;

mod calendar;
mod consistency;
mod headers;
mod limits;
mod numbers;
mod reservations;
mod response;

/// Validates and compiles `(file name, content)` pairs, in load order, into a snapshot,
/// with today's defaults (one file per domain, gcra): see [`compile_sources_with`].
pub fn compile_sources(sources: &[(PathBuf, String)]) -> Result<Snapshot, ConfigErrors> {
    compile_sources_with(sources, &LoadOptions::default())
}

/// Validates and compiles `(file name, content)` pairs, in load order, into a snapshot.
///
/// Every problem of every file is reported, with lines where known, in file order. The
/// snapshot's `version` is the first 16 hex chars of a sha256 over every file's name and
/// content (and `--default-algorithm` when it is not gcra: it changes every bucket;
/// `--stop-charging-when-over-limit` when given: it changes what requests are charged).
pub fn compile_sources_with(
    sources: &[(PathBuf, String)],
    options: &LoadOptions,
) -> Result<Snapshot, ConfigErrors> {
    let mut errors = Vec::new();
    let mut files = Vec::with_capacity(sources.len());
    for (file, source) in sources {
        match yaml::parse(file, source) {
            Ok(raw) => files.push(Parsed { file, raw, positions: Positions::scan(source) }),
            Err(error) => errors.push(error),
        }
    }
    let mut domains = HashMap::new();
    for group in domains::group(&files, options.merge_domains, &mut errors) {
        if let Some(domain) = compile_domain(&group, options, &mut errors) {
            domains.insert(domain.name.clone(), domain);
        }
    }
    for error in &mut errors {
        if error.line.is_none() {
            let positions = files.iter().find(|parsed| parsed.file == error.file).map(|p| &p.positions);
            error.line = positions.and_then(|positions| positions.line_of(&error.path));
        }
    }
    if !errors.is_empty() {
        // A merged domain reports its files' errors together: back to file order.
        errors.sort_by_key(|error| sources.iter().position(|(file, _)| *file == error.file));
        return Err(ConfigErrors(errors));
    }
    Ok(Snapshot {
        domains,
        version: version(sources, options),
        loaded_at: SystemTime::now(),
        files: sources.iter().map(|(file, _)| file.clone()).collect(),
        default_algorithm: options.default_algorithm,
    })
}

/// First 16 hex chars of sha256 over (file name, content) of every file, length-prefixed
/// so that no two different inputs hash the same bytes.
fn version(sources: &[(PathBuf, String)], options: &LoadOptions) -> String {
    let mut hasher = Sha256::new();
    if options.default_algorithm != Algorithm::Gcra {
        // Not a file name and content pair: its length prefix cannot be one of a file's.
        hasher.update(u64::MAX.to_le_bytes());
        hasher.update(options.default_algorithm.as_str());
    }
    if options.stop_charging_when_over_limit {
        // Changes what some requests are charged: another config, another version.
        hasher.update((u64::MAX - 1).to_le_bytes());
    }
    for (file, source) in sources {
        let name = file.file_name().unwrap_or(file.as_os_str()).as_encoded_bytes();
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name);
        hasher.update((source.len() as u64).to_le_bytes());
        hasher.update(source.as_bytes());
    }
    hasher.finalize()[..8].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// One domain from its files (one, or several merged in file-name order); `None` when any
/// of them has errors (all pushed to `errors`).
fn compile_domain(
    group: &[&Parsed<'_>],
    options: &LoadOptions,
    errors: &mut Vec<ConfigError>,
) -> Option<Domain> {
    let default_algorithm = options.default_algorithm;
    let first = group.first()?;
    let before = errors.len();
    let name = match first.raw.domain.as_deref() {
        None => {
            errors.push(ConfigError::new(first.file, "domain", "missing domain"));
            ""
        }
        Some("") => {
            errors.push(ConfigError::new(first.file, "domain", "empty domain"));
            ""
        }
        Some(name) => name,
    };
    let modes: Vec<_> =
        group.iter().map(|parsed| (parsed.file, domains::failure_mode(parsed, errors))).collect();
    let failure_mode =
        domains::agree("failure_mode", &modes, FailureMode::as_str, errors).unwrap_or_default();
    let charges: Vec<_> = group.iter().map(|parsed| (parsed.file, domains::charge(parsed, errors))).collect();
    // `--stop-charging-when-over-limit` is only the default: a domain's `charge` wins.
    let charge = domains::agree("charge", &charges, ChargeMode::as_str, errors).unwrap_or(
        if options.stop_charging_when_over_limit {
            ChargeMode::AllOrNothing
        } else {
            ChargeMode::PerDescriptor
        },
    );
    let tags: Vec<_> = group.iter().map(|parsed| (parsed.file, domains::hash_tag(parsed, errors))).collect();
    let hash_tag = domains::agree("hash_tag", &tags, HashTag::as_str, errors).unwrap_or_default();
    let modes: Vec<_> =
        group.iter().map(|parsed| (parsed.file, domains::consistency(parsed, errors))).collect();
    let consistency = domains::agree("consistency", &modes, Consistency::as_str, errors).unwrap_or_default();
    let reservations = domains::reservations(group, errors);
    reservations::refuse_reservations(first.file, reservations.as_ref(), consistency, charge, errors);
    let mut builder = Builder {
        file: first.file,
        errors,
        rules: Vec::new(),
        default_algorithm,
        consistency,
        charge,
        reservation_key: reservations.as_ref().map(|r| r.key.clone()),
        prefix: String::new(),
    };
    let mut root = Branch::default();
    // Top-level (key, value) → where first defined: the same pair in two files is an error.
    let mut seen = HashMap::new();
    for parsed in group {
        builder.file = parsed.file;
        if group.len() > 1 {
            builder.prefix = domains::label_prefix(parsed.file);
        }
        let nodes = parsed.raw.descriptors.as_deref().unwrap_or_default();
        builder.nodes_into(&mut root, nodes, "", &mut Vec::new(), &mut seen);
    }
    let rules = builder.rules;
    (errors.len() == before).then(|| Domain {
        name: name.to_owned(),
        failure_mode,
        charge,
        hash_tag,
        consistency,
        reservations,
        file: first.file.to_path_buf(),
        files: group.iter().map(|parsed| parsed.file.to_path_buf()).collect(),
        default_algorithm,
        rules,
        tree: Tree { root },
    })
}

/// Where a `(key, value)` of a `descriptors` list was first defined: its index and file.
type Seen<'r, 'f> = HashMap<(&'r str, Option<&'r str>), (usize, &'f Path)>;

/// Walks a domain's descriptors in file order, collecting rules and errors.
struct Builder<'a> {
    /// The file being walked (a merged domain walks several, one after the other).
    file: &'a Path,
    errors: &'a mut Vec<ConfigError>,
    rules: Vec<Rule>,
    /// `--default-algorithm`: for limits that name none.
    default_algorithm: Algorithm,
    /// The domain's `consistency`: an approximate domain refuses the limits it cannot
    /// serve (`compile::consistency`).
    consistency: Consistency,
    /// The domain's `charge`: an `all_or_nothing` domain refuses `overdraft` (a usage that
    /// always counts cannot stand or fall with the rest of a request).
    charge: ChargeMode,
    /// The domain's `reservations.key`: no rule may be unlimited or leased, and no node
    /// may have that key (`compile::reservations`).
    reservation_key: Option<String>,
    /// Put before the rule paths of this file: its stem in a merged domain, else empty.
    prefix: String,
}

impl<'a> Builder<'a> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::new(self.file, path, message));
    }

    /// Compiles one `descriptors` list at `parent` (the path of the owning node, `""` at
    /// the top); `levels` holds the path's levels above it.
    fn branch(&mut self, nodes: &[RawDescriptor], parent: &str, levels: &mut Vec<Level>) -> Branch {
        let mut branch = Branch::default();
        self.nodes_into(&mut branch, nodes, parent, levels, &mut HashMap::new());
        branch
    }

    /// Adds `nodes` to `branch`; `seen` holds the pairs already in it (from earlier files
    /// too, for a merged domain's top level), to name the first in duplicate errors.
    fn nodes_into<'r>(
        &mut self,
        branch: &mut Branch,
        nodes: &'r [RawDescriptor],
        parent: &str,
        levels: &mut Vec<Level>,
        seen: &mut Seen<'r, 'a>,
    ) {
        for (index, raw) in nodes.iter().enumerate() {
            let path = match parent {
                "" => format!("descriptors[{index}]"),
                _ => format!("{parent}.descriptors[{index}]"),
            };
            let key = self.key(raw, &path);
            // `value: ""` is the value-less default, as in envoyproxy/ratelimit.
            let value = raw.value.as_deref().filter(|value| !value.is_empty());
            if !key.is_empty() {
                if let Some(first) = seen.insert((key, value), (index, self.file)) {
                    self.duplicate(&path, key, value, parent, first);
                }
            }
            levels.push(Level {
                key: key.to_owned(),
                shared_pattern: self.shared_pattern(raw, value, &path),
                value: value.map(str::to_owned),
                value_to_metric: raw.value_to_metric,
            });
            let rule = self.rule(raw, &path, levels);
            let children = raw.descriptors.as_deref().unwrap_or_default();
            let children = self.branch(children, &path, levels);
            levels.pop();
            branch.insert(key, value, Node { rule, children });
        }
    }

    fn key<'r>(&mut self, raw: &'r RawDescriptor, path: &str) -> &'r str {
        match raw.key.as_deref() {
            None => self.error(format!("{path}.key"), "missing key"),
            Some("") => self.error(format!("{path}.key"), "empty key"),
            Some(key) => return key,
        }
        ""
    }

    fn duplicate(&mut self, path: &str, key: &str, value: Option<&str>, parent: &str, first: (usize, &Path)) {
        let (index, file) = first;
        let mut first = match parent {
            "" => format!("descriptors[{index}]"),
            _ => format!("{parent}.descriptors[{index}]"),
        };
        if file != self.file {
            first = format!("{first} in {}", file.display());
        }
        let (field, what) = match value {
            Some(value) => ("value", format!("key {key:?} with value {value:?}")),
            None => ("key", format!("key {key:?} without a value")),
        };
        self.error(
            format!("{path}.{field}"),
            format!("duplicate descriptor: {what} is already defined at {first}"),
        );
    }

    /// `Some(pattern)` for a wildcard value with `share_threshold: true`.
    fn shared_pattern(&mut self, raw: &RawDescriptor, value: Option<&str>, path: &str) -> Option<String> {
        if !raw.share_threshold {
            return None;
        }
        match value.filter(|value| is_wildcard(value)) {
            Some(pattern) => Some(pattern.to_owned()),
            None => {
                self.error(
                    format!("{path}.share_threshold"),
                    "share_threshold needs a wildcard value (one containing `*`)",
                );
                None
            }
        }
    }
}

/// `metadata` as sorted `(key, value)` pairs of JSON values: the data model of the
/// `google.protobuf.Struct` it is answered as (`--response-dynamic-metadata`). Keys that are
/// not strings become their YAML text, as envoyproxy/ratelimit prints them.
fn metadata(map: Option<&serde_yaml::Mapping>) -> Vec<(String, serde_json::Value)> {
    let mut pairs: Vec<(String, serde_json::Value)> = map
        .into_iter()
        .flat_map(|map| map.iter())
        .map(|(key, value)| (yaml_text(key), json(value)))
        .collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs
}

/// A YAML value as JSON. Numbers stay numbers (integers exact); a float JSON cannot hold
/// (`.nan`, `.inf`) becomes its YAML text; tags are dropped.
fn json(value: &serde_yaml::Value) -> serde_json::Value {
    use serde_json::Value as Json;
    use serde_yaml::Value as Yaml;
    match value {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Json::from(i),
            (None, Some(u), _) => Json::from(u),
            (None, None, f) => f
                .and_then(serde_json::Number::from_f64)
                .map_or_else(|| Json::String(yaml_text(value)), Json::Number),
        },
        Yaml::String(text) => Json::String(text.clone()),
        Yaml::Sequence(items) => Json::Array(items.iter().map(json).collect()),
        Yaml::Mapping(map) => Json::Object(map.iter().map(|(k, v)| (yaml_text(k), json(v))).collect()),
        Yaml::Tagged(tagged) => json(&tagged.value),
    }
}

fn yaml_text(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(text) => text.clone(),
        other => serde_yaml::to_string(other)
            .map(|text| text.trim_end().to_owned())
            .unwrap_or_else(|_| format!("{other:?}")),
    }
}
