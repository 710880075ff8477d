//! Which files make which domain: one file per domain, or — with `--merge-domains` — every
//! file naming a domain, merged in file-name order.
//!
//! Owns the grouping of parsed files by domain, the duplicate-domain error (without the
//! flag), and the domain-level fields (`failure_mode`, `charge`, `hash_tag`,
//! `consistency`): read per file, agreed across the files of one domain (with it).
//! The merging of descriptors itself is `compile`'s tree building, run over the group's
//! files in order. Pure: no I/O.

use std::collections::HashMap;
use std::path::Path;

use super::error::ConfigError;
use super::model::{ChargeMode, Consistency, FailureMode, HashTag};
use super::raw::{Positions, RawFile};

/// One file that parsed: its name, its YAML and where its paths are.
#[derive(Debug)]
pub(super) struct Parsed<'s> {
    pub(super) file: &'s Path,
    pub(super) raw: RawFile,
    pub(super) positions: Positions,
}

impl Parsed<'_> {
    /// The file's `domain` when it names one (missing and empty are `compile`'s errors).
    fn domain(&self) -> Option<&str> {
        self.raw.domain.as_deref().filter(|name| !name.is_empty())
    }
}

/// The files of each domain, in load order (a domain's files in file-name order).
///
/// With `merge`, every file naming a domain joins that domain's group. Without it, a later
/// file naming a domain already seen is an error naming the first file, and is compiled
/// alone (so that its own errors are reported too). Files without a domain are alone.
pub(super) fn group<'p, 's>(
    files: &'p [Parsed<'s>],
    merge: bool,
    errors: &mut Vec<ConfigError>,
) -> Vec<Vec<&'p Parsed<'s>>> {
    let mut groups: Vec<Vec<&Parsed>> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for parsed in files {
        let Some(name) = parsed.domain() else {
            groups.push(vec![parsed]);
            continue;
        };
        match index.get(name) {
            Some(&at) if merge => groups[at].push(parsed),
            Some(&at) => {
                let first = groups[at][0].file;
                errors.push(ConfigError::new(
                    parsed.file,
                    "domain",
                    format!(
                        "duplicate domain {name:?} (also in {}; --merge-domains merges the files of one domain)",
                        first.display()
                    ),
                ));
                groups.push(vec![parsed]);
            }
            None => {
                index.insert(name, groups.len());
                groups.push(vec![parsed]);
            }
        }
    }
    groups
}

/// The file's `failure_mode`, `None` when it sets none (or an unknown one: an error).
pub(super) fn failure_mode(parsed: &Parsed<'_>, errors: &mut Vec<ConfigError>) -> Option<FailureMode> {
    let mode = parsed.raw.failure_mode.as_deref()?;
    match mode.to_ascii_lowercase().as_str() {
        "open" => Some(FailureMode::Open),
        "closed" => Some(FailureMode::Closed),
        "local" => Some(FailureMode::Local),
        _ => {
            errors.push(ConfigError::new(
                parsed.file,
                "failure_mode",
                format!("unknown failure_mode {mode:?} (expected open, closed or local)"),
            ));
            None
        }
    }
}

/// The file's `charge`, `None` when it sets none (or an unknown one: an error).
pub(super) fn charge(parsed: &Parsed<'_>, errors: &mut Vec<ConfigError>) -> Option<ChargeMode> {
    let mode = parsed.raw.charge.as_deref()?;
    let parsed_mode = ChargeMode::parse(&mode.to_ascii_lowercase());
    if parsed_mode.is_none() {
        errors.push(ConfigError::new(
            parsed.file,
            "charge",
            format!("unknown charge {mode:?} (expected per_descriptor or all_or_nothing)"),
        ));
    }
    parsed_mode
}

/// The file's `hash_tag`, `None` when it sets none (or an unknown one: an error).
pub(super) fn hash_tag(parsed: &Parsed<'_>, errors: &mut Vec<ConfigError>) -> Option<HashTag> {
    let tag = parsed.raw.hash_tag.as_deref()?;
    match tag.to_ascii_lowercase().as_str() {
        "descriptor" => Some(HashTag::Descriptor),
        "domain" => Some(HashTag::Domain),
        _ => {
            errors.push(ConfigError::new(
                parsed.file,
                "hash_tag",
                format!("unknown hash_tag {tag:?} (expected descriptor or domain)"),
            ));
            None
        }
    }
}

/// The file's `consistency`, `None` when it sets none (or an unknown one: an error).
pub(super) fn consistency(parsed: &Parsed<'_>, errors: &mut Vec<ConfigError>) -> Option<Consistency> {
    let mode = parsed.raw.consistency.as_deref()?;
    let parsed_mode = Consistency::parse(&mode.to_ascii_lowercase());
    if parsed_mode.is_none() {
        errors.push(ConfigError::new(
            parsed.file,
            "consistency",
            format!("unknown consistency {mode:?} (expected exact or approximate)"),
        ));
    }
    parsed_mode
}

/// The value of a domain-level field (`failure_mode`, …) over the files of one domain:
/// set in one file, it applies to the whole domain; set to different values in two files,
/// it is an error on the later one naming the earlier. `values` are `(file, value)` in
/// load order, `None` where the file does not set the field.
pub(super) fn agree<T: PartialEq + Copy>(
    field: &str,
    values: &[(&Path, Option<T>)],
    show: impl Fn(T) -> &'static str,
    errors: &mut Vec<ConfigError>,
) -> Option<T> {
    let mut agreed: Option<(&Path, T)> = None;
    for &(file, value) in values {
        let Some(value) = value else { continue };
        match agreed {
            None => agreed = Some((file, value)),
            Some((first, set)) if set != value => errors.push(ConfigError::new(
                file,
                field,
                format!(
                    "{field} {:?} differs from {:?} in {}: the files of one domain must agree \
                     (set it in one of them)",
                    show(value),
                    show(set),
                    first.display()
                ),
            )),
            Some(_) => {}
        }
    }
    agreed.map(|(_, value)| value)
}

/// The label prefix of the rules of a merged domain's file: its stem and `:`
/// (`users.yaml` → `users:`), so that `descriptors[0]` of two files stay apart in metrics,
/// `/rlconfig` and `explain`.
pub(super) fn label_prefix(file: &Path) -> String {
    let stem = file.file_stem().unwrap_or(file.as_os_str());
    format!("{}:", stem.to_string_lossy())
}
