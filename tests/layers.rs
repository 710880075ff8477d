//! Every import points down: the layers of `src/`, read from the `use` lines.
//!
//! Reads every `.rs` file under `src/` (tests included: a test module may reach no higher
//! than its file) and resolves each path of a `use` line — `crate::`, `super::`, `self::`
//! and a bare path that starts with a child module (`pub use limiter::X`) — and each
//! `crate::` path written out in the code to the file of the deepest module it names. When
//! the rest of the path names an item that module re-exports (`pub use child::Item`, or a
//! glob), the import is followed on to the file the item comes from, so that an import
//! through a re-export is an import of both files. Three rules:
//! 1. no cycle between files (`a.rs` imports `b.rs`, which imports `a.rs`, directly or
//!    through others; `pub use` re-exports count, `mod` declarations do not);
//! 2. a file of one area (a top-level module of `src/`) imports only areas of its own
//!    layer or below, in the order of `LAYERS` (the same order as `src/lib.rs`'s table);
//! 3. inside an area, a file of one part (the second-level module; `mod` for the area's own
//!    file) imports only parts of its own layer or below, in the order of `AREAS` (the same
//!    order as each area's module comment). Where an area's own file re-exports its parts
//!    (`service`), it is the top of its area, so importing a re-export of it from inside
//!    the area runs up: import the file that holds the item.
//!
//! A failure names the files and the `use` line. Keeping an upward import on purpose means
//! adding it to `ALLOWED` here with why, and to `src/lib.rs`'s comment.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The areas of `src/`, top to bottom: an area imports only from its own layer or below.
/// Same as `src/lib.rs`'s table.
const LAYERS: &[&[&str]] = &[
    &["main"],
    &["cli"],
    &["app"],
    &["operate"],
    &["service"],
    &["sources"],
    &["telemetry"],
    &["store"],
    &["config"],
    &["algorithm"],
    &["lib"],
];

/// The layers inside each area, top to bottom, as the area's module comment names them;
/// `mod` is the area's own file (`store/mod.rs`, `cli.rs`). Every part of every area is in
/// one layer.
const AREAS: &[(&str, &[&[&str]])] = &[
    (
        "cli",
        &[&["peer", "tests"], &["mod"], &["serve"], &["tracing"], &["redis_tls", "load", "values", "xds"]],
    ),
    ("app", &[&["mod"], &["servers"], &["tasks"], &["loading", "store"], &["settings"]]),
    ("operate", &[&["mod"], &["admin"], &["check", "explain", "rlconfig", "status"]]),
    (
        "service",
        &[
            &["mod"],
            &["server", "rlqs"],
            &["limiter"],
            &["dynamic_metadata", "record", "traced"],
            &["respond"],
            &["headers"],
            &["plan"],
            &["bounds"],
            &["wire"],
        ],
    ),
    ("sources", &[&["mod"], &["reload", "xds"], &["serving"], &["key_changes", "overrides"]]),
    ("telemetry", &[&["mod"], &["trace"], &["metrics"], &["hotkeys"], &["escape"]]),
    (
        "store",
        &[
            &["leasing", "approximating", "syncing", "reset", "reserving", "shared", "rlqs"],
            &["mod"],
            &["guarded"],
            &["approx", "coalesce", "breaker", "lease", "overlimit"],
            &["memory", "redis"],
            &["remote"],
            &["charge", "key", "deadline", "probe"],
        ],
    ),
    (
        "config",
        &[
            &["tests", "xds"],
            &["mod"],
            &["loader"],
            &["compile"],
            &["domains"],
            &["model", "yaml"],
            &["matcher", "merge_keys"],
            &["error", "floats", "options", "raw", "rule"],
        ],
    ),
    (
        "algorithm",
        &[
            &["reservation"],
            &["joint"],
            &["fixed_window", "gcra", "overdraft_tests", "penalty", "share", "sliding_window"],
            &["mod"],
            &["bucket", "saturating"],
        ],
    ),
];

/// Imports kept against the layers on purpose: (importing file, imported file, why).
const ALLOWED: &[(&str, &str, &str)] = &[];

/// One `use` of one file: the line it starts on, the module path it names, the name it
/// brings into scope (the last segment or its `as` alias; `*` for a glob) and whether it
/// is a re-export (`pub use`, `pub(crate) use`, `pub(super) use`) at the file's top level.
#[derive(Debug)]
struct Use {
    line: usize,
    path: Vec<String>,
    name: String,
    reexport: bool,
}

/// The source files, by their path under `src/` (`store/redis/link.rs`), with their text.
struct Tree {
    files: BTreeMap<PathBuf, String>,
}

impl Tree {
    /// Every `.rs` file under `src/`.
    fn read() -> Tree {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
            for entry in fs::read_dir(dir).expect("read src") {
                let path = entry.expect("dir entry").path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = fs::read_to_string(&path).expect("read a source file");
                    out.insert(path.strip_prefix(root).expect("under src").to_path_buf(), text);
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        walk(&root, &root, &mut files);
        Tree { files }
    }

    /// A tree of the given files (for the reader's own tests).
    fn of(files: &[(&str, &str)]) -> Tree {
        Tree { files: files.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect() }
    }

    /// The file a module path lives in, if it is a module of this crate.
    fn file_of(&self, module: &[String]) -> Option<PathBuf> {
        if module.is_empty() {
            return Some(PathBuf::from("lib.rs"));
        }
        let joined: PathBuf = module.iter().collect();
        let flat = joined.with_extension("rs");
        if self.files.contains_key(&flat) {
            return Some(flat);
        }
        let nested = joined.join("mod.rs");
        self.files.contains_key(&nested).then_some(nested)
    }
}

/// The module path of a file: `store/redis/link.rs` → `store::redis::link`;
/// `store/mod.rs` → `store`; `lib.rs` → `` (the crate root).
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

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

/// The paths a `use` tree names, each as its segments and the name it brings into scope
/// (`a::{b, c::d as e}` → `a::b` as `b`, `a::c::d` as `e`).
fn expand(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
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
    let mut parts = tree.split(" as ");
    let named = parts.next().unwrap_or(tree).trim();
    let alias = parts.next().map(str::trim);
    let mut path = prefix.to_vec();
    path.extend(named.split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from));
    let last = path.last().cloned().unwrap_or_default();
    let name = match (alias, last.as_str()) {
        (Some(alias), _) => alias.to_string(),
        // `use a::b::{self}` brings `b`.
        (None, "self") => path.iter().rev().nth(1).cloned().unwrap_or_default(),
        (None, _) => last,
    };
    out.push((path, name));
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
/// path written out in the code (`crate::a::b::c`, `super::b::C`, `self::c::f`);
/// `self`/`super` in an inline module are made relative to the file's module.
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
        let line_start = code[..start].rfind('\n').map_or(0, |i| i + 1);
        let public = code[line_start..start].trim_start().starts_with("pub");
        let body = code[start..end].trim_start_matches("use ").replace(['\n', '\r'], " ");
        let mut paths = Vec::new();
        expand(&body, &[], &mut paths);
        let depth = depth_at(start);
        for (mut path, name) in paths {
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
            found.push(Use { line, path, name, reexport: public && depth == 0 });
        }
        offset = end;
    }
    let mut line_start = 0;
    for (index, line) in code.split_inclusive('\n').enumerate() {
        let at_line = line_start;
        line_start += line.len();
        let trimmed = line.trim_start();
        let trimmed = trimmed
            .strip_prefix("pub(crate) ")
            .or(trimmed.strip_prefix("pub(super) "))
            .or(trimmed.strip_prefix("pub "))
            .unwrap_or(trimmed);
        if trimmed.starts_with("use ") {
            continue;
        }
        // Paths written out in the code: `crate::a::b`, `super::b::C`, `self::c::f()`.
        let mut from = 0;
        while let Some((at, head)) = ["crate::", "super::", "self::"]
            .iter()
            .filter_map(|head| line[from..].find(head).map(|at| (from + at, *head)))
            .min()
        {
            let before = line[..at].chars().last();
            let tail = &line[at..];
            let len =
                tail.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(tail.len());
            // `pub(in crate::a::b)` restricts who sees an item: it imports nothing.
            let visibility = line[..at].trim_end().ends_with("(in");
            if !visibility && !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                let mut path: Vec<String> =
                    tail[..len].split("::").filter(|s| !s.is_empty()).map(String::from).collect();
                let depth = depth_at(at_line + at);
                if depth > 0 && head != "crate::" {
                    let ups = path.iter().take_while(|s| *s == "super").count();
                    if head == "self::" || ups <= depth {
                        // An item of the inline module or of the file's own module.
                        path.drain(..ups.max(1));
                        path.insert(0, "self".into());
                        if head == "self::" {
                            from = at + len.max(1);
                            continue;
                        }
                    } else {
                        path.drain(..depth);
                    }
                }
                found.push(Use { line: index + 1, path, name: String::new(), reexport: false });
            }
            from = at + len.max(1);
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

/// A `use` path of `module` made absolute (from the crate root), or `None` for a path of
/// another crate. A bare path is this crate's when its first segment is a child module.
fn absolute(tree: &Tree, module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut absolute: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("super") => {
            let mut base = module.to_vec();
            base.pop();
            base
        }
        Some("self") => module.to_vec(),
        Some(first) => {
            let mut child = module.to_vec();
            child.push(first.to_string());
            tree.file_of(&child)?;
            let mut base = module.to_vec();
            base.extend(path.iter().cloned());
            return Some(base.into_iter().filter(|s| s != "*" && s != "self").collect());
        }
        None => return None,
    };
    let mut rest = &path[1..];
    while rest.first().is_some_and(|s| s == "super") {
        absolute.pop();
        rest = &rest[1..];
    }
    absolute.extend(rest.iter().cloned());
    absolute.retain(|s| s != "*" && s != "self");
    Some(absolute)
}

/// The files a `use` path of `module` points at: the deepest module of this crate the path
/// names and, when the rest of the path names an item that module re-exports, the files the
/// re-export leads to (followed through further re-exports).
fn targets(
    tree: &Tree,
    reexports: &BTreeMap<PathBuf, Vec<Use>>,
    module: &[String],
    path: &[String],
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    follow(tree, reexports, module, path, 0, &mut out);
    out
}

fn follow(
    tree: &Tree,
    reexports: &BTreeMap<PathBuf, Vec<Use>>,
    module: &[String],
    path: &[String],
    depth: usize,
    out: &mut Vec<PathBuf>,
) {
    let Some(mut absolute) = absolute(tree, module, path) else { return };
    let mut rest = Vec::new();
    while !absolute.is_empty() {
        if let Some(file) = tree.file_of(&absolute) {
            if !out.contains(&file) {
                out.push(file.clone());
            }
            let Some(item) = rest.first() else { return };
            if depth >= 16 {
                return;
            }
            for r in reexports.get(&file).into_iter().flatten() {
                let via = module_of(&file);
                if &r.name == item {
                    let mut next = r.path.clone();
                    next.extend(rest[1..].iter().cloned());
                    follow(tree, reexports, &via, &next, depth + 1, out);
                } else if r.name == "*" {
                    let mut next: Vec<String> = r.path.iter().filter(|s| *s != "*").cloned().collect();
                    next.extend(rest.iter().cloned());
                    follow(tree, reexports, &via, &next, depth + 1, out);
                }
            }
            return;
        }
        rest.insert(0, absolute.pop().expect("not empty"));
    }
}

/// The area of a file (`store` for `store/redis/link.rs`; `lib`/`main` for the roots).
fn area(file: &Path) -> String {
    match module_of(file).first() {
        Some(first) => first.clone(),
        None => file.to_string_lossy().trim_end_matches(".rs").to_string(),
    }
}

/// The part of its area a file is in (`redis` for `store/redis/link.rs`, `mod` for
/// `store/mod.rs` or `cli.rs`), if it is in an area.
fn part(file: &Path) -> Option<String> {
    let module = module_of(file);
    module.first()?;
    Some(module.get(1).cloned().unwrap_or_else(|| "mod".into()))
}

fn layer(area: &str) -> usize {
    LAYERS
        .iter()
        .position(|layer| layer.contains(&area))
        .unwrap_or_else(|| panic!("area `{area}` is in no layer: add it to LAYERS and to src/lib.rs"))
}

fn part_layer(area: &str, part: &str) -> usize {
    let (_, layers) = AREAS
        .iter()
        .find(|(name, _)| *name == area)
        .unwrap_or_else(|| panic!("area `{area}` has no layers: add it to AREAS and to its module comment"));
    layers.iter().position(|layer| layer.contains(&part)).unwrap_or_else(|| {
        panic!("`{area}::{part}` is in no layer: add it to AREAS and to `{area}`'s module comment")
    })
}

fn shown(file: &Path) -> String {
    Path::new("src").join(file).display().to_string()
}

/// Every file's imports of other files: (from, to) → the first line that imports it.
fn graph(tree: &Tree) -> BTreeMap<(PathBuf, PathBuf), usize> {
    let all: BTreeMap<PathBuf, Vec<Use>> = tree.files.iter().map(|(f, t)| (f.clone(), uses(t))).collect();
    let mut reexports: BTreeMap<PathBuf, Vec<Use>> = BTreeMap::new();
    for (file, found) in &all {
        for u in found.iter().filter(|u| u.reexport) {
            reexports.entry(file.clone()).or_default().push(Use {
                line: u.line,
                path: u.path.clone(),
                name: u.name.clone(),
                reexport: true,
            });
        }
    }
    let mut edges = BTreeMap::new();
    for (file, found) in &all {
        let module = module_of(file);
        for u in found {
            for to in targets(tree, &reexports, &module, &u.path) {
                if &to != file {
                    edges.entry((file.clone(), to)).or_insert(u.line);
                }
            }
        }
    }
    edges
}

/// Imports from an area of a lower layer to one of a higher layer.
fn upward_between_areas(edges: &BTreeMap<(PathBuf, PathBuf), usize>) -> Vec<String> {
    let mut wrong = Vec::new();
    for ((from, to), line) in edges {
        let (a, b) = (area(from), area(to));
        if a == b || layer(&a) <= layer(&b) {
            continue;
        }
        let (from_shown, to_shown) = (shown(from), shown(to));
        if ALLOWED.iter().any(|(f, t, _)| *f == from_shown && *t == to_shown) {
            continue;
        }
        wrong.push(format!("{from_shown}:{line} imports {to_shown} (`{a}` is below `{b}`)"));
    }
    wrong
}

/// Imports inside one area from a part of a lower layer to one of a higher layer.
fn upward_inside_areas(edges: &BTreeMap<(PathBuf, PathBuf), usize>) -> Vec<String> {
    let mut wrong = Vec::new();
    for ((from, to), line) in edges {
        let (area_from, area_to) = (area(from), area(to));
        let (Some(a), Some(b)) = (part(from), part(to)) else { continue };
        if area_from != area_to || a == b || part_layer(&area_from, &a) <= part_layer(&area_from, &b) {
            continue;
        }
        let (from_shown, to_shown) = (shown(from), shown(to));
        if ALLOWED.iter().any(|(f, t, _)| *f == from_shown && *t == to_shown) {
            continue;
        }
        wrong.push(format!(
            "{from_shown}:{line} imports {to_shown} (`{area_from}::{a}` is below `{area_from}::{b}`)"
        ));
    }
    wrong
}

/// A cycle of imports between files, each step with its line, if there is one.
fn cycle(edges: &BTreeMap<(PathBuf, PathBuf), usize>) -> Option<Vec<String>> {
    let mut next: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from).or_default().insert(to);
    }
    // Depth-first search for a back edge.
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
                return Some(
                    cycle
                        .windows(2)
                        .map(|w| {
                            let line = edges[&(w[0].clone(), w[1].clone())];
                            format!("{}:{line} imports {}", shown(w[0]), shown(w[1]))
                        })
                        .collect(),
                );
            }
        }
    }
    None
}

#[test]
fn no_import_runs_up_a_layer() {
    let wrong = upward_between_areas(&graph(&Tree::read()));
    assert!(wrong.is_empty(), "imports from a lower layer to a higher one:\n{}", wrong.join("\n"));
}

#[test]
fn no_import_runs_up_a_layer_inside_an_area() {
    let wrong = upward_inside_areas(&graph(&Tree::read()));
    assert!(wrong.is_empty(), "imports from a lower layer of an area to a higher one:\n{}", wrong.join("\n"));
}

#[test]
fn every_part_of_every_area_has_a_layer() {
    for file in Tree::read().files.keys() {
        if let Some(part) = part(file) {
            part_layer(&area(file), &part);
        } else {
            layer(&area(file));
        }
    }
}

#[test]
fn no_two_files_import_each_other() {
    if let Some(steps) = cycle(&graph(&Tree::read())) {
        panic!("files import each other:\n{}", steps.join("\n"));
    }
}

#[test]
fn the_reader_sees_use_lines_as_the_compiler_does() {
    let text = "use crate::store::{charge::{Charge, Groups}, Store};\n\
                // use crate::admin;\n\
                pub use self::x::Y;\n\
                pub use limiter::{validate as check, RateLimiter};\n\
                fn f() { let s = \"use crate::cli;\"; crate::config::load(); super::resets::Log::new(); }\n";
    let found = uses(text);
    let paths: Vec<String> = found.iter().map(|u| u.path.join("::")).collect();
    assert_eq!(
        paths,
        [
            "crate::store::charge::Charge",
            "crate::store::charge::Groups",
            "crate::store::Store",
            "self::x::Y",
            "limiter::validate",
            "limiter::RateLimiter",
            "crate::config::load",
            "super::resets::Log::new"
        ]
    );
    let reexported: Vec<(&str, bool)> = found.iter().map(|u| (u.name.as_str(), u.reexport)).collect();
    assert_eq!(
        reexported,
        [
            ("Charge", false),
            ("Groups", false),
            ("Store", false),
            ("Y", true),
            ("check", true),
            ("RateLimiter", true),
            ("", false),
            ("", false)
        ]
    );
}

/// A small crate in the shape of `service/`: the area's own file re-exports its children.
fn planted(traced: &str) -> Tree {
    Tree::of(&[
        ("lib.rs", "pub mod service;\npub mod store;\n"),
        ("store/mod.rs", "pub mod key;\npub use key::Key;\n"),
        ("store/key.rs", "pub struct Key;\n"),
        (
            "service/mod.rs",
            "pub mod limiter;\npub mod server;\npub mod traced;\npub use server::{Server, NAME};\n",
        ),
        (
            "service/server.rs",
            "use super::limiter::Limiter;\npub const NAME: &str = \"\";\npub struct Server;\n",
        ),
        ("service/limiter.rs", "use super::traced::describe;\nuse crate::store::Key;\npub struct Limiter;\n"),
        ("service/traced.rs", traced),
    ])
}

#[test]
fn a_cycle_through_a_reexport_is_seen() {
    // traced → (mod.rs re-exports server's NAME) → server → limiter → traced.
    let edges = graph(&planted("use super::NAME;\npub fn describe() {}\n"));
    let steps = cycle(&edges).expect("the cycle through `pub use server::…` is seen");
    assert!(steps.iter().any(|s| s.contains("src/service/server.rs")), "{steps:?}");
    // The same item imported from a file below the others is no cycle.
    let edges = graph(&planted("pub fn describe() {}\n"));
    assert_eq!(cycle(&edges), None);
    // A re-export followed to its file: limiter's `crate::store::Key` is store/key.rs's.
    assert!(edges.contains_key(&(PathBuf::from("service/limiter.rs"), PathBuf::from("store/key.rs"))));
}

#[test]
fn an_import_up_an_area_is_seen() {
    // traced imports through service/mod.rs (`service::mod`, the top of the area).
    let edges = graph(&planted("use super::Server;\npub fn describe() {}\n"));
    let wrong = upward_inside_areas(&edges);
    assert!(
        wrong.iter().any(|w| w.starts_with("src/service/traced.rs:1 imports src/service/mod.rs")),
        "{wrong:?}"
    );
    // store below service: an import of service from store runs up between areas.
    let mut tree = planted("pub fn describe() {}\n");
    tree.files
        .insert("store/key.rs".into(), "use crate::service::limiter::Limiter;\npub struct Key;\n".into());
    let wrong = upward_between_areas(&graph(&tree));
    assert_eq!(wrong, ["src/store/key.rs:1 imports src/service/limiter.rs (`store` is below `service`)"]);
}
