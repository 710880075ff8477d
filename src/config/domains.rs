//! Which files make which domain: one file per domain, or — with `--merge-domains` — every
//! file naming a domain, merged in file-name order.
//!
//! Owns the grouping of parsed files by domain, the duplicate-domain error (without the
//! flag), and the domain-level fields (`failure_mode`, `charge`, `hash_tag`,
//! `consistency`, `reservations`): read per file, agreed across the files of one domain (with it).
//! The merging of descriptors itself is `compile`'s tree building, run over the group's
//! files in order. Pure: no I/O.

use std::collections::HashMap;
use std::path::Path;

use super::error::ConfigError;
use super::model::{ChargeMode, Consistency, FailureMode, HashTag, Reservations};
use super::raw::{Positions, RawFile, RawReservations};
use super::rule::penalty_seconds;

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

/// The domain's `reservations` over its files (set in one, it applies to the domain; two
/// files that set different ones: an error on the later), `None` when no file sets them or
/// they are invalid (an error per field, `reservations.key`, `reservations.ttl`).
pub(super) fn reservations(group: &[&Parsed<'_>], errors: &mut Vec<ConfigError>) -> Option<Reservations> {
    let mut set: Option<(&Path, &RawReservations)> = None;
    for parsed in group {
        let Some(raw) = parsed.raw.reservations.as_ref() else { continue };
        match set {
            None => set = Some((parsed.file, raw)),
            Some((first, earlier)) if earlier != raw => errors.push(ConfigError::new(
                parsed.file,
                "reservations",
                format!(
                    "reservations differ from those in {}: the files of one domain must agree (set \
                     them in one of them)",
                    first.display()
                ),
            )),
            Some(_) => {}
        }
    }
    let (file, raw) = set?;
    let before = errors.len();
    let key = match raw.key.as_deref() {
        None | Some("") => {
            errors.push(ConfigError::new(
                file,
                "reservations.key",
                "reservations need a key (the entry that names a reservation)",
            ));
            ""
        }
        Some(key) => key,
    };
    let ttl = match raw.ttl.as_deref().map(ttl_seconds) {
        None => {
            errors.push(ConfigError::new(
                file,
                "reservations.ttl",
                "reservations need a ttl (30s, 10m, 1h: how long a reservation may stay unsettled)",
            ));
            0
        }
        Some(Err(why)) => {
            errors.push(ConfigError::new(
                file,
                "reservations.ttl",
                format!("invalid ttl {:?}: {why}", raw.ttl.as_deref().unwrap_or("")),
            ));
            0
        }
        Some(Ok(seconds)) => seconds,
    };
    (errors.len() == before).then(|| Reservations { key: key.to_owned(), ttl_us: ttl * 1_000_000 })
}

/// A `ttl` in `penalty`'s syntax (`30s`, `10m`, `1h`), from 1s to a day, in seconds.
fn ttl_seconds(written: &str) -> Result<u64, String> {
    penalty_seconds(written).map_err(|why| {
        why.replace(" (leave penalty out for none)", "")
            .replace("the longest penalty (24h)", "the longest ttl (24h)")
    })
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
