//! The documentation cannot drift from the repository or the binary:
//! - every relative link and `#anchor` in README.md and docs/*.md resolves: the file or
//!   directory exists, and an anchor is the GitHub slug of a heading in its target file;
//! - docs/configuration.md lists every flag and `TOLLGATE_*` variable that the built binary's
//!   `--help` prints (for every subcommand), and none that `--help` lacks;
//! - the README's Envoy and policy examples are the shipped files' (envoy/envoy.yaml, which
//!   the e2e tests run, and config/edge.yaml), compared as YAML values, and its `check` and
//!   `explain` session is what the binary prints.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file of docs/.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of a Markdown text outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((index + 1, line));
        }
    }
    lines
}

/// A line with its inline code spans (`` `…` ``) removed: a link shown as code is no link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// GitHub's anchor for a heading: lower-cased, everything but letters, digits, `_`, `-` and
/// spaces dropped, spaces turned into `-`. Link text in a heading counts, its target not.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(start) = rest.find("](") {
        text.push_str(&rest[..start]);
        rest = rest[start + 2..].find(')').map_or("", |end| &rest[start + 2 + end + 1..]);
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown text's headings make; a repeated slug gets `-1`, `-2`, … as on
/// GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim());
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// The targets of the inline links and images of one line: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.to_string());
        rest = &after[end + 1..];
    }
    targets
}

/// Every broken relative link of `text`, read as the file `file`: `file:line: target: why`.
/// `read` gives another Markdown file's text (for its anchors).
fn broken_links(file: &Path, text: &str, read: &dyn Fn(&Path) -> Option<String>) -> Vec<String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let own_anchors = anchors(text);
    let mut broken = Vec::new();
    for (number, line) in prose_lines(text) {
        for target in link_targets(&without_code_spans(line)) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let why = if path.is_empty() {
                anchor
                    .filter(|anchor| !own_anchors.contains(*anchor))
                    .map(|_| "no heading has this anchor here".to_string())
            } else {
                let resolved = dir.join(path);
                if !resolved.exists() {
                    Some(format!("{} does not exist", resolved.display()))
                } else {
                    match anchor {
                        Some(anchor) if path.ends_with(".md") => match read(&resolved) {
                            Some(target_text) if anchors(&target_text).contains(anchor) => None,
                            Some(_) => Some(format!("no heading of {path} has this anchor")),
                            None => Some(format!("{path} is not readable")),
                        },
                        _ => None,
                    }
                }
            };
            if let Some(why) = why {
                broken.push(format!("{}:{number}: {target}: {why}", file.display()));
            }
        }
    }
    broken
}

fn read_file(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut links = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("a document is readable");
        links += prose_lines(&text)
            .iter()
            .map(|(_, line)| link_targets(&without_code_spans(line)).len())
            .sum::<usize>();
        broken.extend(broken_links(&file, &text, &read_file));
    }
    assert!(links > 100, "the checker found only {links} links: is it reading the docs?");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_checker_reports_a_broken_link() {
    let text = "# Here\n\
        [fine](configuration.md#tollgate-serve) and [here](#here)\n\
        [gone](no-such-file.md) and [bad anchor](configuration.md#no-such-heading)\n\
        [bad own anchor](#nowhere) and `[as code](nowhere.md)`\n\
        ```\n[in a code block](nowhere.md)\n```\n";
    let file = root().join("docs").join("self-check.md");
    let broken = broken_links(&file, text, &read_file);
    let targets: Vec<&str> = broken.iter().map(|line| line.split(": ").nth(1).unwrap_or("")).collect();
    assert_eq!(
        targets,
        ["no-such-file.md", "configuration.md#no-such-heading", "#nowhere"],
        "reported: {broken:#?}"
    );
    assert!(broken[0].contains("self-check.md:3:"), "the line is named: {}", broken[0]);
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug("Admin endpoints (`--admin-addr`, default 127.0.0.1:9102)"),
        "admin-endpoints---admin-addr-default-1270019102"
    );
    assert_eq!(slug("Use with Envoy / Istio"), "use-with-envoy--istio");
    assert_eq!(slug("The peer's variables"), "the-peers-variables");
    assert_eq!(slug("Differences from envoyproxy/ratelimit"), "differences-from-envoyproxyratelimit");
    assert_eq!(slug("See [the page](x.md) now"), "see-the-page-now");
    let repeated = anchors("## Step\n## Step\n```\n## Not a heading\n```\n");
    assert_eq!(repeated, BTreeSet::from(["step".to_string(), "step-1".to_string()]));
}

/// The subcommands whose flags docs/configuration.md documents.
const SUBCOMMANDS: [&str; 5] = ["serve", "check", "explain", "usage", "reset"];

/// The flags (`--name`) and variables (`[env: NAME=]`) a `--help` text prints. Option lines
/// are indented less than their descriptions; `--help` and `--version` are clap's own.
fn help_names(help: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut flags = BTreeSet::new();
    let mut vars = BTreeSet::new();
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        if indent < 8 && line.trim_start().starts_with('-') {
            for token in line.split([' ', ',', '=', '[', '<']) {
                if let Some(name) = token.strip_prefix("--").filter(|name| !name.is_empty()) {
                    flags.insert(format!("--{name}"));
                }
            }
        }
        let mut rest = line;
        while let Some(start) = rest.find("[env: ") {
            let after = &rest[start + 6..];
            let end = after.find(['=', ']']).unwrap_or(after.len());
            vars.insert(after[..end].to_string());
            rest = &after[end..];
        }
    }
    flags.remove("--help");
    flags.remove("--version");
    (flags, vars)
}

/// The flags (`--name`) and `TOLLGATE_*` variables a text names.
fn doc_names(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    let mut flags = BTreeSet::new();
    let mut vars = BTreeSet::new();
    for (index, _) in text.match_indices("--") {
        let before = text[..index].chars().next_back();
        let name: String = text[index + 2..].chars().take_while(|&c| word(c)).collect();
        if before.is_none_or(|c| !word(c)) && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            flags.insert(format!("--{}", name.trim_end_matches('-')));
        }
    }
    for (index, _) in text.match_indices("TOLLGATE_") {
        let name: String = text[index..]
            .chars()
            .take_while(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            .collect();
        let name = name.trim_end_matches('_');
        if name != "TOLLGATE" {
            vars.insert(name.to_string());
        }
    }
    (flags, vars)
}

#[test]
fn configuration_lists_every_flag_of_help_and_no_other() {
    let mut help_flags = BTreeSet::new();
    let mut help_vars = BTreeSet::new();
    for subcommand in SUBCOMMANDS {
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args([subcommand, "--help"])
            .output()
            .expect("the tollgate binary runs");
        assert!(output.status.success(), "tollgate {subcommand} --help failed");
        let (flags, vars) = help_names(&String::from_utf8_lossy(&output.stdout));
        assert!(!flags.is_empty(), "no flag read from tollgate {subcommand} --help");
        help_flags.extend(flags);
        help_vars.extend(vars);
    }
    assert!(help_flags.len() > 80, "only {} flags read from --help", help_flags.len());
    assert!(help_vars.contains("TOLLGATE_STORE_TIMEOUT_MS"), "env names read: {help_vars:?}");

    let page = std::fs::read_to_string(root().join("docs/configuration.md")).expect("docs/configuration.md");
    let (mut doc_flags, doc_vars) = doc_names(&page);
    // clap's own, which the page may name when it speaks of the help itself.
    doc_flags.remove("--help");
    doc_flags.remove("--version");
    let undocumented: Vec<_> = help_flags.difference(&doc_flags).collect();
    let unknown: Vec<_> = doc_flags.difference(&help_flags).collect();
    assert!(undocumented.is_empty(), "flags of --help missing from docs/configuration.md: {undocumented:?}");
    assert!(unknown.is_empty(), "flags in docs/configuration.md that --help lacks: {unknown:?}");
    let undocumented: Vec<_> = help_vars.difference(&doc_vars).collect();
    let unknown: Vec<_> = doc_vars.difference(&help_vars).collect();
    assert!(
        undocumented.is_empty(),
        "variables of --help missing from docs/configuration.md: {undocumented:?}"
    );
    assert!(unknown.is_empty(), "variables in docs/configuration.md that --help lacks: {unknown:?}");
}

#[test]
fn the_flag_reader_sees_what_a_page_names() {
    let (flags, vars) = doc_names(
        "| `--grpc-tls-cert F`, `--tracing[=true\\|false]` | `TOLLGATE_GRPC_TLS_CERT`, `TOLLGATE_*` |\n|---|---|\nre--enter",
    );
    assert_eq!(flags, BTreeSet::from(["--grpc-tls-cert".to_string(), "--tracing".to_string()]));
    assert_eq!(vars, BTreeSet::from(["TOLLGATE_GRPC_TLS_CERT".to_string()]));
    let (flags, vars) = help_names(
        "Options:\n      --store <STORE>\n          Where buckets live\n          - memory: in process\n          [env: TOLLGATE_STORE=]\n  -h, --help\n",
    );
    assert_eq!(flags, BTreeSet::from(["--store".to_string()]));
    assert_eq!(vars, BTreeSet::from(["TOLLGATE_STORE".to_string()]));
}

/// The YAML code blocks of a Markdown text, parsed.
fn yaml_blocks(text: &str) -> Vec<serde_yaml::Value> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match current.as_mut() {
            None if line.trim_start() == "```yaml" => current = Some(String::new()),
            Some(_) if line.trim_start() == "```" => {
                let block = current.take().unwrap_or_default();
                blocks.push(serde_yaml::from_str(&block).expect("a YAML block of the README parses"));
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

fn shipped(path: &str) -> serde_yaml::Value {
    let text = std::fs::read_to_string(root().join(path)).expect("a shipped file is readable");
    serde_yaml::from_str(&text).expect("a shipped file parses")
}

#[test]
fn the_readme_examples_are_the_shipped_files() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let blocks = yaml_blocks(&readme);
    let envoy = shipped("envoy/envoy.yaml");
    let manager =
        &envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    let tollgate_cluster = &envoy["static_resources"]["clusters"][0];
    assert_eq!(tollgate_cluster["name"], "tollgate", "envoy/envoy.yaml's first cluster");
    let expected = [
        ("the filters", &blocks[0]["http_filters"], &manager["http_filters"]),
        ("the cluster", &blocks[1]["clusters"][0], tollgate_cluster),
        (
            "the actions",
            &blocks[2]["rate_limits"],
            &manager["route_config"]["virtual_hosts"][0]["rate_limits"],
        ),
    ];
    for (what, in_readme, in_envoy) in expected {
        assert!(!in_envoy.is_null(), "{what}: not found in envoy/envoy.yaml");
        assert_eq!(in_readme, in_envoy, "{what}: the README differs from envoy/envoy.yaml");
    }
    assert_eq!(blocks[3], shipped("config/edge.yaml"), "the first policy differs from config/edge.yaml");
}

#[test]
fn the_readme_console_session_is_what_the_binary_prints() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let start = readme.find("```console\n").expect("the README has a console session") + 11;
    let session = &readme[start..start + readme[start..].find("```").expect("the session ends")];
    let mut commands = 0;
    for run in session.split("$ ").filter(|run| !run.trim().is_empty()) {
        let (command, expected) = run.split_once('\n').unwrap_or((run, ""));
        let mut words = command.split_whitespace();
        assert_eq!(words.next(), Some("tollgate"), "a session command runs tollgate: {command}");
        let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(words)
            .current_dir(root())
            .output()
            .expect("the tollgate binary runs");
        assert!(output.status.success(), "`{command}` failed: {}", String::from_utf8_lossy(&output.stderr));
        let printed = String::from_utf8_lossy(&output.stdout);
        assert_eq!(printed.trim_end(), expected.trim_end(), "`{command}` prints otherwise than the README");
        commands += 1;
    }
    assert_eq!(commands, 2, "the session runs check and explain");
}
