//! Every policy fixture under `tests/fixtures/config/`: each invalid one must fail with its
//! specific error (file, rule path, field, line), every valid one must load, and the
//! directory loader must pick the right files (dotfiles, `..data`, symlinks, order).

use std::fs;
use std::path::{Path, PathBuf};

use tollgate::config::{load_path, ConfigError, ConfigErrors, Lookup, RuleLimit, Snapshot};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/config")
}

/// (fixture, rule path + field, message fragment, line).
const INVALID: &[(&str, &str, &str, Option<usize>)] = &[
    (
        "burst_too_long.yaml",
        "descriptors[1].rate_limit.burst",
        "burst 72 at 1 per year takes more than 71 years to drain",
        Some(12),
    ),
    (
        "burst_with_sliding_window.yaml",
        "descriptors[0].rate_limit.burst",
        "burst applies to gcra only (algorithm is sliding_window)",
        Some(8),
    ),
    ("burst_zero.yaml", "descriptors[0].rate_limit.burst", "burst must be greater than 0", Some(7)),
    (
        "duplicate_default_key.yaml",
        "descriptors[0].descriptors[1].key",
        "key \"user\" without a value is already defined at descriptors[0].descriptors[0]",
        Some(9),
    ),
    (
        "duplicate_key_value.yaml",
        "descriptors[2].value",
        "key \"database\" with value \"users\" is already defined at descriptors[0]",
        Some(11),
    ),
    ("empty_domain.yaml", "domain", "empty domain", Some(2)),
    ("empty_file.yaml", "", "no domain", None),
    ("empty_key.yaml", "descriptors[0].descriptors[0].key", "empty key", Some(5)),
    ("empty_replaces.yaml", "descriptors[0].rate_limit.replaces", "empty replaces list", Some(7)),
    (
        "float_key.yaml",
        "descriptors[0].descriptors[0].key",
        "a floating-point number where a string belongs: quote it",
        Some(5),
    ),
    (
        "float_value.yaml",
        "descriptors[0].value",
        "a floating-point number where a string belongs: quote it",
        Some(4),
    ),
    (
        "merge_not_a_mapping.yaml",
        "descriptors[0].<<",
        "expected a mapping or a list of mappings to merge",
        Some(4),
    ),
    // A parse error inside merged content: the path goes through `<<`, the line is the
    // anchor's text.
    ("merge_unknown_field.yaml", "descriptors[1].<<.unit", "unknown field `unit`", Some(5)),
    // A validation error of a merged field: the line of the `<<:` that merged it.
    (
        "merge_unlimited_with_unit.yaml",
        "descriptors[0].descriptors[0].rate_limit.unit",
        "unit must not be set together with unlimited: true",
        Some(11),
    ),
    ("misplaced_unit.yaml", "descriptors[0].descriptors[0].unit", "unknown field `unit`", Some(7)),
    ("missing_domain.yaml", "domain", "missing domain", None),
    ("missing_key.yaml", "descriptors[1].key", "missing key", Some(4)),
    (
        "missing_requests_per_unit.yaml",
        "descriptors[0].rate_limit.requests_per_unit",
        "missing requests_per_unit",
        Some(4),
    ),
    ("missing_unit.yaml", "descriptors[0].rate_limit.unit", "missing unit", Some(4)),
    (
        "negative_requests_per_unit.yaml",
        "descriptors[0].rate_limit.requests_per_unit",
        "invalid type: integer `-5`, expected u32",
        Some(6),
    ),
    (
        "non_map_list.yaml",
        "descriptors[1]",
        "invalid type: string \"just a string\", expected a descriptor mapping",
        Some(4),
    ),
    (
        "penalty_too_long.yaml",
        "descriptors[0].rate_limit.penalty",
        "penalty \"36h\": longer than a day, the longest penalty (24h)",
        Some(7),
    ),
    (
        "replaces_empty_name.yaml",
        "descriptors[0].rate_limit.replaces[1].name",
        "replaces entry without a name",
        Some(9),
    ),
    (
        "replaces_self.yaml",
        "descriptors[0].rate_limit.replaces[0].name",
        "rule \"mine\" replaces itself",
        Some(9),
    ),
    (
        "response_unknown_placeholder.yaml",
        "descriptors[0].rate_limit.response.body",
        "unknown placeholder {retry_after} (expected {limit}, {window} or {reset})",
        Some(8),
    ),
    (
        "rollout_out_of_range.yaml",
        "descriptors[0].rate_limits[1].rollout",
        "rollout 1.5 is outside (0, 1]",
        Some(11),
    ),
    ("several_documents.yaml", "", "several YAML documents in one file", Some(3)),
    (
        "share_threshold_without_wildcard.yaml",
        "descriptors[0].share_threshold",
        "share_threshold needs a wildcard value",
        Some(5),
    ),
    ("syntax_error.yaml", "", "did not find expected key", Some(6)),
    (
        "unknown_algorithm.yaml",
        "descriptors[0].rate_limit.algorithm",
        "unknown algorithm \"leaky_bucket\" (expected gcra, sliding_window or fixed_window)",
        Some(7),
    ),
    (
        "unknown_failure_mode.yaml",
        "failure_mode",
        "unknown failure_mode \"maybe\" (expected open, closed or local)",
        Some(2),
    ),
    (
        "unknown_field.yaml",
        "descriptors[0].rate_limit.request_per_unit",
        "unknown field `request_per_unit`",
        Some(6),
    ),
    ("unknown_top_level_field.yaml", "descriptor", "unknown field `descriptor`", Some(2)),
    (
        "unknown_unit.yaml",
        "descriptors[2].rate_limit.unit",
        "unknown unit \"fortnight\" (expected second, minute, hour, day, week, month or year)",
        Some(7),
    ),
    (
        "unlimited_with_unit.yaml",
        "descriptors[0].rate_limit.unit",
        "unit must not be set together with unlimited: true",
        Some(6),
    ),
    (
        "wrong_type.yaml",
        "descriptors[0].rate_limit.requests_per_unit",
        "invalid type: string \"many\", expected u32",
        Some(6),
    ),
];

fn load_errors(path: &Path) -> ConfigErrors {
    match load_path(path) {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(errors) => errors,
    }
}

#[test]
fn each_invalid_fixture_reports_its_error() {
    for &(name, path, fragment, line) in INVALID {
        let file = fixtures().join("invalid").join(name);
        let errors = load_errors(&file);
        let [error] = errors.errors() else {
            panic!("{name}: expected one error, got:\n{errors}");
        };
        let expected = (file.as_path(), path, line);
        assert_eq!((error.file.as_path(), error.path.as_str(), error.line), expected, "{name}: {error}");
        assert!(error.message.contains(fragment), "{name}: {error}");
        let rendered = error.to_string();
        let location = match line {
            Some(line) => format!("{}:{line}: ", file.display()),
            None => format!("{}: ", file.display()),
        };
        assert!(rendered.starts_with(&location), "{name}: {rendered}");
        assert!(rendered.contains(path), "{name}: {rendered}");
    }
}

#[test]
fn every_invalid_fixture_has_an_expectation() {
    let mut names: Vec<String> = fs::read_dir(fixtures().join("invalid"))
        .expect("invalid fixtures")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name != "three_problems.yaml")
        .collect();
    names.sort();
    let expected: Vec<&str> = INVALID.iter().map(|(name, ..)| *name).collect();
    assert_eq!(names, expected);
}

#[test]
fn all_problems_of_a_file_are_collected() {
    let errors = load_errors(&fixtures().join("invalid/three_problems.yaml"));
    let found: Vec<(&str, Option<usize>)> =
        errors.errors().iter().map(|e| (e.path.as_str(), e.line)).collect();
    assert_eq!(
        found,
        [
            ("descriptors[0].key", Some(4)),
            ("descriptors[1].rate_limit.unit", Some(7)),
            ("descriptors[2].rate_limit.requests_per_unit", Some(10)),
        ]
    );
    assert_eq!(errors.to_string().lines().count(), 3);
}

#[test]
fn every_valid_fixture_loads_alone_and_together() {
    let dir = fixtures().join("valid");
    let mut count = 0;
    for entry in fs::read_dir(&dir).expect("valid fixtures") {
        let path = entry.expect("entry").path();
        if let Err(errors) = load_path(&path) {
            panic!("{} does not load:\n{errors}", path.display());
        }
        count += 1;
    }
    let snapshot = load_path(&dir).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(snapshot.domains.len(), count);
    let mut names: Vec<&str> = snapshot.domains.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["api", "compat", "edge_proxy", "merge_keys", "messaging"]);
}

#[test]
fn merge_keys_compile_as_their_expanded_form() {
    let merged = load_path(&fixtures().join("valid/merge_keys.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let expanded = load_path(&fixtures().join("expanded/merge_keys.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let (merged, expanded) =
        (merged.domain("merge_keys").expect("merged"), expanded.domain("merge_keys").expect("expanded"));
    assert_eq!(merged.failure_mode, expanded.failure_mode);
    assert_eq!(merged.rules, expanded.rules);
    let probes: &[&[(&str, &str)]] = &[
        &[("remote_address", "1.2.3.4")],
        &[("api_key", "partner-1"), ("remote_address", "1.2.3.4")],
        &[("api_key", "partner-2")],
        &[("tenant", "acme")],
        &[("tenant", "acme"), ("user", "u1")],
        &[("tenant", "globex"), ("user", "admin")],
        &[("tenant", "globex"), ("plan", "3")],
        &[("tenant", "initech"), ("user", "admin")],
        &[("tenant", "initech"), ("plan", "3")],
        &[("tenant", "other"), ("user", "u1")],
        &[("path", "/upload")],
        &[("region", "eu"), ("user", "u1")],
        &[("region", "eu")],
    ];
    for probe in probes {
        let (a, b) = (merged.lookup(probe.iter().copied()), expanded.lookup(probe.iter().copied()));
        assert_eq!(a, b, "{probe:?}");
    }
    // Spot checks that the comparison compares something.
    let Lookup::Rule(upload) = merged.lookup([("path", "/upload")]) else { panic!("upload") };
    assert_eq!(upload.name.as_deref(), Some("uploads"));
    let Lookup::Rule(globex) = merged.lookup([("tenant", "globex")]) else { panic!("globex") };
    let Lookup::Rule(initech) = merged.lookup([("tenant", "initech")]) else { panic!("initech") };
    assert!(!globex.shadow_mode && initech.shadow_mode);
    assert_eq!(merged.lookup([("tenant", "initech"), ("plan", "3")]), Lookup::NoMatch);
}

fn rule_name<'s>(snapshot: &'s Snapshot, entries: &[(&str, &str)]) -> Lookup<'s> {
    let domain = snapshot.domain("edge_proxy").expect("edge_proxy");
    domain.lookup(entries.iter().copied())
}

#[test]
fn the_realistic_fixture_matches_as_documented() {
    let snapshot = load_path(&fixtures().join("valid/edge_proxy.yaml")).expect("loads");
    let rule = |entries: &[(&str, &str)]| match rule_name(&snapshot, entries) {
        Lookup::Rule(rule) => rule,
        other => panic!("{entries:?}: {other:?}"),
    };
    assert_eq!(rule(&[("remote_address", "1.2.3.4")]).label(), "per_ip");
    let blocked = rule(&[("remote_address", "50.0.0.5")]);
    assert!(matches!(&blocked.limit, RuleLimit::Limited(limits) if limits[0].params.limit == 0));
    assert_eq!(rule(&[("remote_address", "10.0.0.7")]).limit, RuleLimit::Unlimited);
    assert!(rule(&[("service", "auth"), ("user", "user-a")]).shadow_mode);
    assert!(!rule(&[("service", "auth"), ("user", "user-b")]).shadow_mode);
    assert_eq!(rule(&[("api_key", "partner-1"), ("remote_address", "1.2.3.4")]).replaces, ["per_ip"]);
    let shared = rule(&[("path", "/api/v2/action")]);
    assert_eq!(shared.levels[0].shared_pattern.as_deref(), Some("/api/*/action"));
    assert_eq!(rule_name(&snapshot, &[("path", "/healthz")]), Lookup::Allow);
    assert_eq!(rule_name(&snapshot, &[("path", "/other")]), Lookup::NoMatch);
}

/// A scratch directory, removed on drop.
struct TempDir(tempfile::TempDir);

impl TempDir {
    fn new() -> TempDir {
        TempDir(tempfile::tempdir().expect("temp dir"))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.path().join(name);
        fs::create_dir_all(path.parent().expect("parent")).expect("create parent");
        fs::write(&path, content).expect("write");
        path
    }
}

#[test]
fn directory_loads_yaml_files_sorted_and_ignores_the_rest() {
    let dir = TempDir::new();
    dir.write("b.yaml", "domain: b\n");
    dir.write("a.yml", "domain: a\n");
    dir.write("notes.txt", "not yaml: [");
    dir.write("README", "domain: readme\n");
    dir.write(".hidden.yaml", "not: [valid");
    dir.write("..data/inner.yaml", "not: [valid");
    dir.write("nested/c.yaml", "domain: nested\n");
    fs::create_dir_all(dir.path().join("dir.yaml")).expect("a directory named like a file");
    let snapshot = load_path(dir.path()).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(snapshot.files, [dir.path().join("a.yml"), dir.path().join("b.yaml")]);
    assert_eq!(snapshot.domains.len(), 2);
}

#[cfg(unix)]
#[test]
fn directory_follows_configmap_symlinks() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new();
    dir.write("..2024_01_01_00_00_00.1/api.yaml", "domain: api\n");
    dir.write("..2024_01_01_00_00_00.1/web.yml", "domain: web\n");
    symlink("..2024_01_01_00_00_00.1", dir.path().join("..data")).expect("..data link");
    symlink("..data/api.yaml", dir.path().join("api.yaml")).expect("api link");
    symlink("..data/web.yml", dir.path().join("web.yml")).expect("web link");
    let snapshot = load_path(dir.path()).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(snapshot.files, [dir.path().join("api.yaml"), dir.path().join("web.yml")]);
    assert!(snapshot.domain("api").is_some() && snapshot.domain("web").is_some());

    symlink("..data/gone.yaml", dir.path().join("gone.yaml")).expect("broken link");
    let errors = load_errors(dir.path());
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!(error.file, dir.path().join("gone.yaml"));
    assert!(error.message.starts_with("cannot read"), "{error}");
}

#[test]
fn the_same_domain_in_two_files_names_both() {
    let dir = fixtures().join("duplicate_domain");
    let errors = load_errors(&dir);
    let [error] = errors.errors() else { panic!("{errors}") };
    let expected = ConfigError {
        file: dir.join("b.yaml"),
        path: "domain".to_owned(),
        line: Some(2),
        message: format!(
            "duplicate domain \"shared\" (also in {}; --merge-domains merges the files of one domain)",
            dir.join("a.yaml").display()
        ),
    };
    assert_eq!(error, &expected);
}

#[test]
fn directory_without_yaml_and_missing_paths_are_errors() {
    let dir = TempDir::new();
    dir.write("notes.txt", "domain: x\n");
    let errors = load_errors(dir.path());
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!((&error.file, error.path.as_str()), (&dir.path().to_path_buf(), ""));
    assert!(error.message.contains("no *.yaml or *.yml file"), "{error}");

    let missing = dir.path().join("missing.yaml");
    let errors = load_errors(&missing);
    let [error] = errors.errors() else { panic!("{errors}") };
    assert_eq!(error.file, missing);
    assert!(error.message.starts_with("cannot read"), "{error}");
}

#[test]
fn a_single_file_loads_whatever_its_extension() {
    let dir = TempDir::new();
    let file = dir.write("policy.conf", "domain: single\n");
    let snapshot = load_path(&file).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(snapshot.files, [file]);
    assert!(snapshot.domain("single").is_some());
}
