//! One file's YAML text to a `RawFile`: the parser's errors as `ConfigError`s with their
//! line and config path, merge keys resolved (`merge_keys`), floats where strings belong
//! refused (`floats`).
//!
//! Syntax only, above the shape it fills (`raw`) and below `compile`, which judges the
//! result. Does no I/O: the caller hands the text in.

use std::path::Path;

use serde::Deserialize;

use super::error::ConfigError;
use super::floats::refuse_floats;
use super::merge_keys::FileLayer;
use super::raw::RawFile;

/// Parses one file. Empty files, several YAML documents, syntax errors, wrong types,
/// unknown fields and floats where strings belong are errors, carrying the parser's line;
/// merge keys (`<<`) are resolved. Integers and booleans in string fields keep their text.
pub fn parse(file: &Path, source: &str) -> Result<RawFile, ConfigError> {
    // Never iterate this deserializer past an error: after a syntax error it yields the
    // same error forever. At most two documents are pulled.
    let mut documents = serde_yaml::Deserializer::from_str(source);
    let Some(first) = documents.next() else {
        return Err(empty_file(file));
    };
    let raw = Option::<FileLayer>::deserialize(first).map_err(|e| from_yaml(file, &e))?;
    if documents.next().is_some() {
        return Err(ConfigError::new(file, "", "several YAML documents in one file (one domain per file)")
            .at_line(second_document_line(source)));
    }
    let raw = raw.ok_or_else(|| empty_file(file))?;
    refuse_floats(source).map_err(|e| from_yaml(file, &e))?;
    Ok(raw.resolve())
}

fn empty_file(file: &Path) -> ConfigError {
    ConfigError::new(file, "", "no domain: the file is empty")
}

/// The `---` line that starts the second document, if the scan finds it.
fn second_document_line(source: &str) -> Option<usize> {
    let mut seen_content = false;
    for (n, line) in source.lines().enumerate() {
        if line.starts_with("---") && seen_content {
            return Some(n + 1);
        }
        let trimmed = line.trim();
        if !trimmed.is_empty() && !trimmed.starts_with('#') && !trimmed.starts_with('%') {
            seen_content = true;
        }
    }
    None
}

/// Turns a serde_yaml error into a `ConfigError`: its path prefix becomes the rule path
/// (with the offending field appended for unknown/duplicate fields), its location the line.
fn from_yaml(file: &Path, error: &serde_yaml::Error) -> ConfigError {
    let location = error.location();
    let mut text = error.to_string();
    if let Some(loc) = &location {
        let suffix = format!(" at line {} column {}", loc.line(), loc.column());
        if let Some(stripped) = text.strip_suffix(&suffix) {
            text = stripped.to_owned();
        }
    }
    let (mut path, message) = match text.split_once(": ") {
        Some((p, m)) if is_path(p) => (p.to_owned(), m.to_owned()),
        _ => (String::new(), text),
    };
    if let Some(field) = named_field(&message) {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(field);
    }
    ConfigError::new(file, path, message).at_line(location.map(|l| l.line()))
}

/// serde_yaml renders paths as `descriptors[0].rate_limit` (`descriptors[1].<<.unit` inside
/// merged content); messages never start that way.
fn is_path(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '[' | ']' | '.' | '?' | '<'))
}

/// The field named by serde's "unknown field `x`" / "duplicate field `x`" messages.
fn named_field(message: &str) -> Option<&str> {
    let rest =
        message.strip_prefix("unknown field `").or_else(|| message.strip_prefix("duplicate field `"))?;
    rest.split_once('`').map(|(field, _)| field)
}
