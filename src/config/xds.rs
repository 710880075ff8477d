//! Policies from xDS: `RateLimitConfig` resources (`proto`) turned into policy files
//! (`convert`) and compiled, one resource at a time, by the same compiler as files.
//!
//! Two steps. [`decode`] reads every resource of a response; one that does not decode, or
//! is of another type, rejects the **whole** response (`Undecodable`, naming each such slot
//! by index and type URL): without its bytes nothing says which domain the slot held, so no
//! last good version could be kept for it, and applying the rest would silently drop that
//! domain. [`Resources::apply`] then compiles the decoded resources per resource, better than
//! envoyproxy/ratelimit's all-or-nothing: one that does not compile is rejected on its own,
//! with errors naming it (its `name`), the rule path and the field; it keeps its last good
//! version (or stays absent), and every good resource applies. A resource missing from a
//! response is removed (state of the world).
//! Pure: no network, no clock but the snapshot's load time; `apply` returns the next state
//! and never changes the current one, so a caller that fails midway still has it. The client
//! (`crate::sources::xds`) owns the stream and decides what to ACK.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use prost::Message;

use super::compile::compile_sources_with;
use super::error::ConfigError;
use super::model::Snapshot;
use super::options::LoadOptions;

pub mod convert;
pub mod proto;

pub use proto::TYPE_URL;

/// The resources that serve: name → the policy file text of its last good version.
#[derive(Debug, Default, Clone)]
pub struct Resources {
    good: BTreeMap<String, String>,
}

/// One slot of a response that cannot be read as a `RateLimitConfig`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSlot {
    /// Its index in the response's `resources`.
    pub index: usize,
    /// The slot's `type_url`, as sent.
    pub type_url: String,
    /// Why it cannot be read (a foreign type, or the decoder's error).
    pub problem: String,
}

/// A response that cannot apply at all: some of its resources do not decode as a
/// `RateLimitConfig` or are of another type. Its text is the `error_detail` of the answer:
/// a first line saying the whole response was rejected, then `resources[i] (type_url):
/// problem` per bad slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Undecodable {
    /// Every bad slot, in response order (never empty).
    pub slots: Vec<BadSlot>,
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "response rejected as a whole, nothing of it applied (every last good version serves):")?;
        for slot in &self.slots {
            write!(f, "\nresources[{}] ({}): {}", slot.index, slot.type_url, slot.problem)?;
        }
        Ok(())
    }
}

/// Decodes every resource of a response, `(type_url, bytes)` each, in order; any slot that
/// is of another type or does not decode rejects the whole response, every such slot named.
pub fn decode<'a>(
    resources: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<Vec<proto::RateLimitConfig>, Undecodable> {
    let mut configs = Vec::new();
    let mut slots = Vec::new();
    for (index, (type_url, bytes)) in resources.into_iter().enumerate() {
        let problem = if type_url != TYPE_URL {
            format!("unexpected resource type (expected {TYPE_URL})")
        } else {
            match proto::RateLimitConfig::decode(bytes) {
                Ok(config) => {
                    configs.push(config);
                    continue;
                }
                Err(e) => format!("cannot decode RateLimitConfig: {e}"),
            }
        };
        slots.push(BadSlot { index, type_url: type_url.to_owned(), problem });
    }
    if slots.is_empty() {
        Ok(configs)
    } else {
        Err(Undecodable { slots })
    }
}

/// One resource of a response that was not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// The resource's name (`resources[i]` when it has none).
    pub name: String,
    /// True when its last good version keeps serving; false when it is absent.
    pub kept_previous: bool,
    /// Its problems, each naming the resource, the rule path and the field.
    pub errors: Vec<ConfigError>,
}

/// What one response made of the resources.
#[derive(Debug)]
pub struct Applied {
    /// The state after this response, to keep once the snapshot is swapped in.
    pub resources: Resources,
    /// The snapshot to serve: every good resource, and the last good version of rejected ones.
    pub snapshot: Snapshot,
    /// The resources not applied, by name.
    pub rejected: Vec<Rejected>,
}

impl Applied {
    /// The rejected resources as one text: `name: path: message` per problem, one a line
    /// (the NACK's `error_detail`, the log line, `/rlconfig`).
    pub fn rejection_text(&self) -> Option<String> {
        let lines: Vec<String> =
            self.rejected.iter().flat_map(|r| r.errors.iter().map(ToString::to_string)).collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }
}

impl Resources {
    /// The names of the resources serving now, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.good.keys().map(String::as_str)
    }

    /// Applies one state-of-the-world response, every resource decoded ([`decode`]), on top
    /// of these last good versions. Never fails: a resource that cannot compile is rejected
    /// and reported in `Applied::rejected`. `self` is left as it was: the next state is
    /// `Applied::resources`.
    pub fn apply(
        &self,
        configs: impl IntoIterator<Item = proto::RateLimitConfig>,
        options: &LoadOptions,
    ) -> Applied {
        let mut rejected = Vec::new();
        let mut candidates: BTreeMap<String, String> = BTreeMap::new();
        for (index, config) in configs.into_iter().enumerate() {
            let unnamed = format!("resources[{index}]");
            match one(&unnamed, &config, &candidates, options) {
                Ok((name, text)) => {
                    candidates.insert(name, text);
                }
                Err((name, errors)) => {
                    let previous = self.good.get(&name).filter(|_| !candidates.contains_key(&name));
                    if let Some(previous) = previous {
                        candidates.insert(name.clone(), previous.clone());
                    }
                    rejected.push(Rejected { name, kept_previous: previous.is_some(), errors });
                }
            }
        }
        let snapshot = self.settle(&mut candidates, &mut rejected, options);
        Applied { resources: Resources { good: candidates }, snapshot, rejected }
    }

    /// Compiles the candidates together. Errors only a set can have (a domain in two
    /// resources) reject the resources they name: each falls back to its last good version,
    /// then is dropped, until the set compiles. Every round reverts or drops at least one
    /// candidate and the empty set compiles, so this ends. Unchanged resources compile
    /// first, so a duplicate domain is blamed on the resource that brought it.
    fn settle(
        &self,
        candidates: &mut BTreeMap<String, String>,
        rejected: &mut Vec<Rejected>,
        options: &LoadOptions,
    ) -> Snapshot {
        loop {
            let mut sources: Vec<(PathBuf, String)> =
                candidates.iter().map(|(name, text)| (PathBuf::from(name), text.clone())).collect();
            if !options.merge_domains {
                // Stable: sorted by name within each group.
                sources.sort_by_key(|(name, text)| self.good.get(&*name.to_string_lossy()) != Some(text));
            }
            let errors = match compile_sources_with(&sources, options) {
                Ok(snapshot) => return snapshot,
                Err(errors) => without_lines(errors.0),
            };
            let mut blamed: BTreeMap<String, Vec<ConfigError>> = BTreeMap::new();
            for error in errors {
                blamed.entry(error.file.to_string_lossy().into_owned()).or_default().push(error);
            }
            let mut changed = false;
            for (name, errors) in blamed {
                let Some(current) = candidates.get(&name) else { continue };
                let previous = self.good.get(&name).filter(|p| *p != current).cloned();
                changed = true;
                match &previous {
                    Some(previous) => candidates.insert(name.clone(), previous.clone()),
                    None => candidates.remove(&name),
                };
                match rejected.iter_mut().find(|r| r.name == name) {
                    Some(entry) => {
                        entry.kept_previous = false;
                        entry.errors.extend(errors);
                    }
                    None => rejected.push(Rejected { name, kept_previous: previous.is_some(), errors }),
                }
            }
            if !changed {
                candidates.clear();
            }
        }
    }
}

/// Compiles one decoded resource alone: `(name, policy text)`, or its errors.
fn one(
    unnamed: &str,
    config: &proto::RateLimitConfig,
    seen: &BTreeMap<String, String>,
    options: &LoadOptions,
) -> Result<(String, String), (String, Vec<ConfigError>)> {
    let name = if config.name.is_empty() { unnamed.to_owned() } else { config.name.clone() };
    if seen.contains_key(&name) {
        let error = ConfigError::new(&name, "", "duplicate resource name in one response");
        return Err((name, vec![error]));
    }
    let text = convert::to_yaml(config);
    match compile_sources_with(&[(PathBuf::from(&name), text.clone())], options) {
        Ok(_) => Ok((name, text)),
        Err(errors) => Err((name, without_lines(errors.0))),
    }
}

/// Lines of the generated text mean nothing to whoever wrote the resource.
fn without_lines(errors: Vec<ConfigError>) -> Vec<ConfigError> {
    errors.into_iter().map(|e| e.at_line(None)).collect()
}

#[cfg(test)]
mod tests;
