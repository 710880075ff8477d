//! Validation: every error is collected, named by path and field, with a line.
//! One fixture per rule is checked in `tests/config_fixtures.rs`; these are the cases that
//! are clearer inline.

use std::path::PathBuf;

use super::errors;
use crate::config::{compile_sources, ConfigError};

fn summary(error: &ConfigError) -> (String, Option<usize>) {
    (error.path.clone(), error.line)
}

#[test]
fn all_problems_of_a_file_are_reported() {
    let found = errors(
        r#"domain: d
descriptors:
  - key: ""
    rate_limit:
      unit: fortnight
      requests_per_unit: 1
  - key: b
    rate_limit:
      requests_per_unit: 1
      algorithm: fixed_window
      burst: 5
"#,
    );
    let found: Vec<_> = found.errors().iter().map(summary).collect();
    assert_eq!(
        found,
        [
            ("descriptors[0].key".to_owned(), Some(3)),
            ("descriptors[0].rate_limit.unit".to_owned(), Some(5)),
            ("descriptors[1].rate_limit.burst".to_owned(), Some(11)),
            ("descriptors[1].rate_limit.unit".to_owned(), Some(8)),
        ]
    );
}

#[test]
fn problems_of_every_file_are_reported() {
    let sources = [
        (
            PathBuf::from("a.yaml"),
            "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: x, requests_per_unit: 1}\n"
                .to_owned(),
        ),
        (PathBuf::from("b.yaml"), "domain: b\ndescriptors: [\n".to_owned()),
        (PathBuf::from("c.yaml"), "domain: c\n".to_owned()),
        (PathBuf::from("d.yaml"), "domain: a\n".to_owned()),
    ];
    let Err(found) = compile_sources(&sources) else {
        panic!("should not load");
    };
    let files: Vec<_> = found.errors().iter().map(|e| e.file.to_string_lossy().into_owned()).collect();
    assert_eq!(files, ["a.yaml", "b.yaml", "d.yaml"]);
    let duplicate = &found.errors()[2];
    assert_eq!((duplicate.path.as_str(), duplicate.line), ("domain", Some(1)));
    assert!(duplicate.message.contains("a.yaml"), "{duplicate}");
}

#[test]
fn display_gives_file_line_path_and_message() {
    let found = errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n");
    assert_eq!(
        found.to_string(),
        "test.yaml:5: descriptors[0].rate_limit.unit: unknown unit \"fortnight\" \
         (expected second, minute, hour, day, week, month or year)"
    );
    let two = errors("domain: \"\"\nfailure_mode: sideways\n");
    assert_eq!(
        two.to_string(),
        "test.yaml:1: domain: empty domain\n\
         test.yaml:2: failure_mode: unknown failure_mode \"sideways\" (expected open, closed or local)"
    );
    let file_level = ConfigError::new("x.yaml", "", "no domain: the file is empty");
    assert_eq!(file_level.to_string(), "x.yaml: no domain: the file is empty");
}

#[test]
fn serde_errors_name_the_field_and_line() {
    let found = errors("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unt: second\n");
    let [error] = found.errors() else { panic!("{found}") };
    assert_eq!(summary(error), ("descriptors[0].rate_limit.unt".to_owned(), Some(5)));
    assert!(error.message.starts_with("unknown field `unt`"), "{error}");

    // serde_yaml places a duplicate field at the start of its mapping.
    let found = errors("domain: d\ndomain: e\n");
    let [error] = found.errors() else { panic!("{found}") };
    assert_eq!(summary(error), ("domain".to_owned(), Some(1)));

    let found = errors("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n");
    let [error] = found.errors() else { panic!("{found}") };
    assert_eq!(summary(error), ("descriptors[0].shadow_mode".to_owned(), Some(4)));
}

#[test]
fn empty_and_comment_only_files_have_no_domain() {
    for source in ["", "# nothing yet\n", "---\n"] {
        let found = errors(source);
        let [error] = found.errors() else { panic!("{found}") };
        assert_eq!(error.path, "", "{source:?}");
        assert!(error.message.contains("no domain"), "{error}");
    }
}

#[test]
fn several_documents_are_an_error_at_the_second() {
    let found = errors("# api\n---\ndomain: a\n---\ndomain: b\n");
    let [error] = found.errors() else { panic!("{found}") };
    assert_eq!((error.path.as_str(), error.line), ("", Some(4)));
    assert!(error.message.contains("several YAML documents"), "{error}");
}

#[test]
fn nulls_are_absent_values() {
    // `descriptors:` with nothing under it is an empty domain, as in envoyproxy/ratelimit.
    let found = compile_sources(&[(PathBuf::from("n.yaml"), "domain: n\ndescriptors:\n".to_owned())]);
    assert!(found.is_ok());
}
