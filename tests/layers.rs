//! Every import points down: the layers of `src/`, read from the `use` lines.
//!
//! Reads every `.rs` file under `src/` (tests included: a test module may reach no higher
//! than its file), resolves each `use` path that starts with `crate::`, `super::` or
//! `self::` to the file of the deepest module it names, and checks two rules:
//! 1. no cycle between files (`a.rs` imports `b.rs`, which imports `a.rs`, directly or
//!    through others; `pub use` re-exports count, `mod` declarations do not);
//! 2. a file of one top-level module imports only modules of its own layer or below, in the
//!    order of `LAYERS` (the same order as `src/lib.rs`'s module comment).
//!
//! A failure names the files and the `use` line. Keeping an upward import on purpose means
//! adding it to `ALLOWED` here with why, and to `src/lib.rs`'s comment.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers of `src/`, top to bottom: a module imports only from its own layer or one
/// below it. Same as `src/lib.rs`'s comment.
const LAYERS: &[&[&str]] = &[
    &["main"],
    &["cli"],
    &["app"],
    &["admin"],
    &["explain"],
    &["status", "reload", "xds"],
    &["service"],
    &["live", "check", "trace"],
    &["metrics", "hotkeys", "fresh", "overrides"],
    &["store", "rlconfig"],
    &["config"],
    &["algorithm", "escape"],
    &["lib"],
];

/// The layers inside `store/`, top to bottom (as `src/store/mod.rs`'s comment names them);
/// `mod` is `store/mod.rs` itself, the dispatch.
const STORE_LAYERS: &[&[&str]] = &[
    &["leasing", "approximating", "syncing", "reset", "shared"],
    &["mod"],
    &["guarded"],
    &["approx", "coalesce", "breaker", "lease", "overlimit"],
    &["memory", "redis"],
    &["remote"],
    &["charge", "key", "deadline", "probe"],
];

/// Imports kept against the layers on purpose: (importing file, imported file, why).
const ALLOWED: &[(&str, &str, &str)] = &[];

/// One `use` of one file: the line it starts on and the module path it names.
#[derive(Debug)]
struct Use {
    line: usize,
    path: Vec<String>,
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `src/store/redis/link.rs` → `store::redis::link`;
/// `src/store/mod.rs` → `store`; `src/lib.rs` → `` (the crate root).
fn module_of(file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The file a module path lives in, if it is a module of this crate.
fn file_of(module: &[String]) -> Option<PathBuf> {
    let base = src();
    if module.is_empty() {
        return Some(base.join("lib.rs"));
    }
    let joined: PathBuf = module.iter().collect();
    let flat = base.join(&joined).with_extension("rs");
    if flat.is_file() {
        return Some(flat);
    }
    let nested = base.join(&joined).join("mod.rs");
    nested.is_file().then_some(nested)
}

/// Code without comments and string literals (so that a `use` in a doc example or a
/// string is not read), line breaks kept.
fn strip(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    if bytes[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    if bytes.get(i) == Some(&b'\n') {
                        out.push('\n');
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => {
                out.push_str("' '");
                i += 3;
            }
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                // An escaped char literal: '\n', '\'', '\u{..}'.
                i += 3;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            }
            b => {
                out.push(b as char);
                i += 1;
            }
        }
    }
    out
}

/// The paths a `use` tree names, each as its segments (`a::{b, c::d}` → `a::b`, `a::c::d`).
fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> =
            tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        let mut path = prefix.to_vec();
        path.extend(head);
        let close = tree.rfind('}').expect("balanced braces");
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..i], &path, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(&inner[start..], &path, out);
        return;
    }
    let tree = tree.split(" as ").next().unwrap_or(tree).trim();
    let mut path = prefix.to_vec();
    path.extend(tree.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    out.push(path);
}

/// The inline modules of a file's code (`mod tests { … }`): their name and byte span.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let mut found = Vec::new();
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        if let Some(rest) = trimmed.strip_prefix("mod ") {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if rest[name.len()..].trim_start().starts_with('{') {
                let open = offset + line.find('{').expect("an opening brace");
                let mut depth = 0;
                let mut end = code.len();
                for (i, c) in code[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + i;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                found.push((open, end, name));
            }
        }
        offset += line.len();
    }
    found
}

/// Every `use` of a file's code, also those inside functions and test modules, and every
/// path written out in full in the code (`crate::a::b::c`); `self`/`super` of a `use` in an
/// inline module are made relative to the file's module.
fn uses(text: &str) -> Vec<Use> {
    let code = strip(text);
    let inline = inline_modules(&code);
    let depth_at = |at: usize| inline.iter().filter(|(start, end, _)| *start < at && at < *end).count();
    let mut found = Vec::new();
    let mut offset = 0;
    while let Some(at) = find_use(&code[offset..]) {
        let start = offset + at;
        let end = start + code[start..].find(';').expect("use ends with ;");
        let line = code[..start].matches('\n').count() + 1;
        let body = code[start..end].trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        let body = body.trim_start_matches("use ").replace(['\n', '\r'], " ");
        let mut paths = Vec::new();
        expand(&body, &[], &mut paths);
        let depth = depth_at(start);
        for mut path in paths {
            // Inside `mod tests { … }`, `super` is the file's module and `self` is below it.
            if depth > 0 && matches!(path.first().map(String::as_str), Some("super" | "self")) {
                let ups = path.iter().take_while(|s| *s == "super").count();
                if path[0] == "self" {
                    continue; // an item of the inline module itself
                }
                if ups <= depth {
                    path.drain(..ups);
                    path.insert(0, "self".into());
                } else {
                    path.drain(..depth);
                }
            }
            found.push(Use { line, path });
        }
        offset = end;
    }
    for (index, line) in code.lines().enumerate() {
        let trimmed = line.trim_start();
        let trimmed =
            trimmed.strip_prefix("pub(crate) ").or(trimmed.strip_prefix("pub(super) ")).unwrap_or(trimmed);
        if trimmed.starts_with("use ") || trimmed.starts_with("pub use ") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            let tail = &rest[at..];
            let len =
                tail.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(tail.len());
            if !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                let path: Vec<String> =
                    tail[..len].split("::").filter(|s| !s.is_empty()).map(String::from).collect();
                found.push(Use { line: index + 1, path });
            }
            rest = &tail[len.max(1)..];
        }
    }
    found
}

/// The next `use` statement (at a line start, possibly `pub`), as an offset.
fn find_use(code: &str) -> Option<usize> {
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        for prefix in ["use ", "pub use ", "pub(crate) use ", "pub(super) use "] {
            if trimmed.starts_with(prefix) {
                return Some(offset + indent + prefix.len() - 4);
            }
        }
        offset += line.len();
    }
    None
}

/// The file a `use` path of `module` (the importing file's module) points at: the deepest
/// module of this crate the path names, or `None` for other crates and the module itself.
fn target(module: &[String], own_file: &Path, path: &[String]) -> Option<PathBuf> {
    let mut absolute: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") => {
            // `super` of a file's module; in a `mod.rs`/`lib.rs` the module is the folder.
            let mut base = module.to_vec();
            base.pop();
            base
        }
        Some("self") => module.to_vec(),
        _ => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        absolute.pop();
        rest = &rest[1..];
    }
    absolute.extend(rest.iter().cloned());
    // `use super::*` / glob: the module itself.
    absolute.retain(|s| s != "*" && s != "self");
    while !absolute.is_empty() {
        if let Some(file) = file_of(&absolute) {
            return (file != own_file).then_some(file);
        }
        absolute.pop();
    }
    None
}

/// The top-level module of a file (`store` for `src/store/redis/link.rs`; `lib` for the root).
fn top(file: &Path) -> String {
    module_of(file).first().cloned().unwrap_or_else(|| "lib".into())
}

/// The part of `store/` a file is in (`redis` for `src/store/redis/link.rs`, `mod` for
/// `src/store/mod.rs`), if it is in `store/`.
fn store_part(file: &Path) -> Option<String> {
    let module = module_of(file);
    (module.first().map(String::as_str) == Some("store"))
        .then(|| module.get(1).cloned().unwrap_or_else(|| "mod".into()))
}

fn store_layer(part: &str) -> usize {
    STORE_LAYERS.iter().position(|layer| layer.contains(&part)).unwrap_or_else(|| {
        panic!("`store::{part}` is in no layer: add it to STORE_LAYERS and to src/store/mod.rs")
    })
}

fn layer(top: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&top))
        .unwrap_or_else(|| panic!("module `{top}` is in no layer: add it to LAYERS and to src/lib.rs"))
}

fn shown(file: &Path) -> String {
    file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap_or(file).display().to_string()
}

/// Every file's imports of other files: (from, to) → the first line that imports it.
fn graph() -> BTreeMap<(PathBuf, PathBuf), usize> {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut edges = BTreeMap::new();
    for file in &all {
        let text = fs::read_to_string(file).expect("read a source file");
        let module = module_of(file);
        // `super` in `x/mod.rs` and `lib.rs` is one level up from the folder: module_of
        // already names the folder, so treat it like any file of that module.
        for u in uses(&text) {
            if let Some(to) = target(&module, file, &u.path) {
                edges.entry((file.clone(), to)).or_insert(u.line);
            }
        }
    }
    edges
}

#[test]
fn no_import_runs_up_a_layer() {
    let mut wrong = Vec::new();
    for ((from, to), line) in graph() {
        let (a, b) = (top(&from), top(&to));
        if a == b || layer(&a) <= layer(&b) {
            continue;
        }
        let (from_shown, to_shown) = (shown(&from), shown(&to));
        if ALLOWED.iter().any(|(f, t, _)| *f == from_shown && *t == to_shown) {
            continue;
        }
        wrong.push(format!("{from_shown}:{line} imports {to_shown} (`{a}` is below `{b}`)"));
    }
    assert!(wrong.is_empty(), "imports from a lower layer to a higher one:\n{}", wrong.join("\n"));
}

#[test]
fn no_import_runs_up_a_layer_of_the_store() {
    let mut wrong = Vec::new();
    for ((from, to), line) in graph() {
        let (Some(a), Some(b)) = (store_part(&from), store_part(&to)) else { continue };
        if a != b && store_layer(&a) > store_layer(&b) {
            wrong.push(format!(
                "{}:{line} imports {} (`store::{a}` is below `store::{b}`)",
                shown(&from),
                shown(&to)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports from a lower layer of the store to a higher one:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_files_import_each_other() {
    let edges = graph();
    let mut next: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().insert(to);
    }
    // Depth-first search for a back edge; the cycle is printed with each step's line.
    fn visit<'a>(
        node: &'a PathBuf,
        next: &BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
        state: &mut BTreeMap<&'a PathBuf, u8>,
        stack: &mut Vec<&'a PathBuf>,
    ) -> Option<Vec<&'a PathBuf>> {
        state.insert(node, 1);
        stack.push(node);
        for to in next.get(node).into_iter().flatten() {
            match state.get(to).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|n| n == to).expect("on the stack");
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(to);
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(to, next, state, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node, 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in next.keys() {
        if state.get(node).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(node, &next, &mut state, &mut Vec::new()) {
                let steps: Vec<String> = cycle
                    .windows(2)
                    .map(|w| {
                        format!(
                            "{}:{} imports {}",
                            shown(w[0]),
                            edges[&(w[0].clone(), w[1].clone())],
                            shown(w[1])
                        )
                    })
                    .collect();
                panic!("files import each other:\n{}", steps.join("\n"));
            }
        }
    }
}

#[test]
fn the_reader_sees_use_lines_as_the_compiler_does() {
    let text = "use crate::store::{charge::{Charge, Groups}, Store};\n\
                // use crate::admin;\n\
                pub use self::x::Y;\n\
                fn f() { let s = \"use crate::cli;\"; crate::config::load(); }\n";
    let paths: Vec<String> = uses(text).iter().map(|u| u.path.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::store::charge::Charge",
            "crate::store::charge::Groups",
            "crate::store::Store",
            "self::x::Y",
            "crate::config::load"
        ]
    );
}
