//! The position scan that gives semantic errors their lines.

use crate::config::raw::Positions;

const LAYOUTS: &str = r#"# comment
domain: api   # trailing comment
descriptors:
  - key: a
    value: "x: y"
    metadata:
      note: |
        key: not a key
        descriptors: neither
      "quoted key": 1
    rate_limit:
      unit: minute
  - key: b
    descriptors:
    - key: c
      rate_limit: {unit: second}
    - key: d

      rate_limit:
        unit: hour
    shadow_mode: true
  -   key: e
"#;

#[test]
fn block_layouts_map_paths_to_lines() {
    let positions = Positions::scan(LAYOUTS);
    let line = |path| positions.line_of(path);
    assert_eq!(line("domain"), Some(2));
    assert_eq!(line("descriptors"), Some(3));
    assert_eq!(line("descriptors[0]"), Some(4));
    assert_eq!(line("descriptors[0].value"), Some(5));
    assert_eq!(line("descriptors[0].metadata.note"), Some(7));
    assert_eq!(line("descriptors[0].metadata.quoted key"), Some(10));
    assert_eq!(line("descriptors[0].rate_limit.unit"), Some(12));
    assert_eq!(line("descriptors[1].key"), Some(13));
    // A sequence at its parent key's indent.
    assert_eq!(line("descriptors[1].descriptors[0].key"), Some(15));
    assert_eq!(line("descriptors[1].descriptors[1].rate_limit.unit"), Some(20));
    assert_eq!(line("descriptors[1].shadow_mode"), Some(21));
    assert_eq!(line("descriptors[2].key"), Some(22));
}

#[test]
fn missing_paths_fall_back_to_their_nearest_ancestor() {
    let positions = Positions::scan(LAYOUTS);
    // Inside a flow mapping: the line of the mapping's key.
    assert_eq!(positions.line_of("descriptors[1].descriptors[0].rate_limit.requests_per_unit"), Some(16));
    assert_eq!(positions.line_of("descriptors[0].rate_limit.burst"), Some(11));
    assert_eq!(positions.line_of("descriptors[9].key"), Some(3));
    assert_eq!(positions.line_of("failure_mode"), None);
    assert_eq!(positions.line_of(""), None);
}

#[test]
fn block_scalar_text_is_not_scanned() {
    let positions = Positions::scan(LAYOUTS);
    assert_eq!(positions.line_of("descriptors[0].metadata.note.key"), Some(7));
    assert_eq!(positions.line_of("descriptors[0].metadata.descriptors"), Some(6));
}

#[test]
fn anchors_are_skipped_and_merged_fields_point_at_their_merge_key() {
    let positions = Positions::scan(
        "domain: d\ndescriptors:\n  - &base\n    key: a\n  - <<: *base\n    value: b\n  - &c key: c\n    rate_limit:\n      <<: *rl\n",
    );
    let line = |path| positions.line_of(path);
    assert_eq!(line("descriptors[0].key"), Some(4));
    assert_eq!(line("descriptors[1].<<"), Some(5));
    assert_eq!(line("descriptors[1].key"), Some(5));
    assert_eq!(line("descriptors[1].value"), Some(6));
    assert_eq!(line("descriptors[1].descriptors[3].key"), Some(5));
    assert_eq!(line("descriptors[2].key"), Some(7));
    assert_eq!(line("descriptors[2].rate_limit.unit"), Some(9));
    // Items never come from a merge key: an unknown item falls back to its list.
    assert_eq!(line("descriptors[7]"), Some(2));
}
