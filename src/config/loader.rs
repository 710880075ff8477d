//! Reading policies from disk: a directory of `*.yaml`/`*.yml` files or a single file.
//!
//! The only part of `config` that touches the file system. It decides which files load and
//! in what order, reads them, and hands names and contents to `compile_sources`; it must not
//! parse or validate anything itself, and does not watch for changes (the reloader does).

use std::fs;
use std::path::{Path, PathBuf};

use super::compile::compile_sources_with;
use super::error::{ConfigError, ConfigErrors};
use super::model::Snapshot;
use super::options::LoadOptions;

/// Loads, validates and compiles the policies at `path` with the default options.
pub fn load_path(path: &Path) -> Result<Snapshot, ConfigErrors> {
    load_path_with(path, &LoadOptions::default())
}

/// Loads, validates and compiles the policies at `path`.
///
/// A directory loads every regular file, or symlink to one, named `*.yaml` or `*.yml`
/// directly inside it, sorted by name; names starting with `.` (dotfiles and Kubernetes
/// ConfigMap `..data`-style entries) and other extensions are ignored. ConfigMap mounts,
/// where `name.yaml -> ..data/name.yaml`, load through the symlink. A directory without
/// any YAML file is an error. Any other path is read as a single file.
/// I/O errors name the file; all problems of all files are reported together.
/// Files are compiled in that order, so a domain merged from several files (`options`)
/// takes them in file-name order.
pub fn load_path_with(path: &Path, options: &LoadOptions) -> Result<Snapshot, ConfigErrors> {
    let metadata = fs::metadata(path).map_err(|e| io_error(path, &e))?;
    let files = if metadata.is_dir() { policy_files(path)? } else { vec![path.to_path_buf()] };
    let mut sources = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for file in files {
        match fs::read_to_string(&file) {
            Ok(source) => sources.push((file, source)),
            Err(e) => errors.push(io_error(&file, &e)),
        }
    }
    match compile_sources_with(&sources, options) {
        Ok(snapshot) if errors.is_empty() => Ok(snapshot),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(compile_errors) => {
            errors.extend(compile_errors);
            Err(ConfigErrors(errors))
        }
    }
}

/// The policy files directly inside `dir`, sorted by name.
fn policy_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigErrors> {
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, &e))?;
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                errors.push(io_error(dir, &e));
                continue;
            }
        };
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue; // not UTF-8, so not a `*.yaml` name we could have been asked for
        };
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let path = entry.path();
        // fs::metadata follows symlinks: a ConfigMap's `api.yaml -> ..data/api.yaml` counts.
        match fs::metadata(&path) {
            Ok(metadata) if metadata.is_file() => files.push(path),
            Ok(_) => {}
            Err(e) => errors.push(io_error(&path, &e)),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    if files.is_empty() {
        return Err(ConfigError::new(dir, "", "no *.yaml or *.yml file in this directory").into());
    }
    files.sort();
    Ok(files)
}

fn io_error(path: &Path, error: &std::io::Error) -> ConfigError {
    ConfigError::new(path, "", format!("cannot read: {error}"))
}
