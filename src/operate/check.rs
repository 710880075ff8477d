//! `tollgate check PATH [--against OLD]`: validates a config as `serve` would load it and,
//! given the config it would replace, says which buckets the change starts afresh
//! (`crate::sources::key_changes`), as a reload of it would warn. Reads files only; the caller prints.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::{self, LoadOptions};

/// The report on stdout when `path` is valid (and `against` too), else every error. A change
/// that starts buckets afresh is not an error: the report lists it and the check passes.
pub fn check(path: &Path, against: Option<&Path>, options: &LoadOptions) -> Result<String, String> {
    let snapshot = config::load_path_with(path, options).map_err(|errors| errors.to_string())?;
    let mut out = format!(
        "{}: ok ({} domains, {} rules, version {})\n",
        path.display(),
        snapshot.domains.len(),
        snapshot.rule_count(),
        snapshot.version
    );
    let Some(against) = against else { return Ok(out) };
    let old = config::load_path_with(against, options)
        .map_err(|errors| format!("--against {}: cannot load it:\n{errors}", against.display()))?;
    let fresh = crate::sources::key_changes::between(&old, &snapshot);
    if fresh.is_empty() {
        let _ = writeln!(out, "against {}: no bucket starts afresh", against.display());
    } else {
        let _ = writeln!(
            out,
            "against {}: these buckets start afresh (bucket keys change, counts reset):",
            against.display()
        );
        for change in &fresh {
            let _ = writeln!(out, "  {change}");
        }
    }
    Ok(out)
}
