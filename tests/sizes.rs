//! Every room one job, in numbers: no `.rs` file under `src/` over [`MAX_FILE_LINES`] lines
//! and no function over [`MAX_FN_LINES`] lines outside tests.
//!
//! A file counts whole, its inline `#[cfg(test)]` module included; files named `tests.rs`
//! and files under a `tests/` folder do not count (they are tests). A function is counted
//! from its `fn` line to its closing brace by brace depth (braces in strings, chars and
//! comments are left out); functions inside a `#[cfg(test)]` item are tests and are not
//! counted. A file or function that has to stay over a limit is named in `KNOWN` with why,
//! so that the list only shrinks.

use std::fs;
use std::path::{Path, PathBuf};

/// The longest a source file may be, in lines.
const MAX_FILE_LINES: usize = 400;
/// The longest a function may be, in lines.
const MAX_FN_LINES: usize = 80;

/// Over a limit for now: (file, function or `""` for the file, why).
const KNOWN: &[(&str, &str, &str)] = &[];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir` that is not a test file.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if path.is_dir() {
            if name != "tests" {
                files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The code of a line with string and char literals and comments blanked, so that only the
/// braces of the code remain; `in_block` carries a `/* … */` comment across lines.
fn code_of(line: &str, in_block: &mut bool) -> String {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if *in_block {
            if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                *in_block = false;
                i += 2;
            } else {
                i += 1;
            }
            continue;
        }
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => break,
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                *in_block = true;
                i += 2;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            b => {
                out.push(b as char);
                i += 1;
            }
        }
    }
    out
}

/// Whether a line starts a function (`fn`, with any of `pub(…)`, `const`, `async`, `unsafe`).
fn starts_fn(code: &str) -> Option<String> {
    let mut words = code.split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            w if w.starts_with("pub") => {}
            "const" | "async" | "unsafe" | "extern" | "default" => {}
            "fn" => {
                let name = words.next()?;
                return Some(name.split(['(', '<']).next().unwrap_or(name).to_string());
            }
            _ => return None,
        }
    }
    None
}

/// The functions of a file longer than `MAX_FN_LINES`: (name, first line, lines).
fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let mut in_block = false;
    let lines: Vec<String> = text.lines().map(|l| code_of(l, &mut in_block)).collect();
    let mut long = Vec::new();
    let mut i = 0;
    let mut test_item = false;
    while i < lines.len() {
        let line = lines[i].trim();
        if line.starts_with("#[cfg(test)]") {
            test_item = true;
            i += 1;
            continue;
        }
        let name = starts_fn(line);
        let opens = line.starts_with("mod ") || line.starts_with("pub mod ") || line.starts_with("impl");
        if test_item || name.is_some() {
            // The item's extent: to the brace that closes its first one, or a `;` before any.
            let (mut depth, mut opened, mut end) = (0i64, false, i);
            for (j, l) in lines.iter().enumerate().skip(i) {
                for c in l.chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                end = j;
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            if !test_item && opened {
                let length = end - i + 1;
                if length > MAX_FN_LINES {
                    long.push((name.unwrap_or_default(), i + 1, length));
                }
            }
            // A test item is skipped whole; a function's body holds no other function we count.
            if test_item || !opens {
                i = end + 1;
                test_item = false;
                continue;
            }
        }
        i += 1;
    }
    long
}

fn shown(file: &Path) -> String {
    file.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR"))).unwrap_or(file).display().to_string()
}

fn known(file: &str, function: &str) -> bool {
    KNOWN.iter().any(|(f, n, _)| *f == file && *n == function)
}

#[test]
fn no_source_file_is_over_the_limit() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut over = Vec::new();
    for file in &all {
        let lines = fs::read_to_string(file).expect("read a source file").lines().count();
        let name = shown(file);
        if lines > MAX_FILE_LINES && !known(&name, "") {
            over.push(format!("{name}: {lines} lines"));
        }
    }
    assert!(over.is_empty(), "files over {MAX_FILE_LINES} lines:\n{}", over.join("\n"));
}

#[test]
fn no_function_is_over_the_limit() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    let mut over = Vec::new();
    for file in &all {
        let text = fs::read_to_string(file).expect("read a source file");
        let name = shown(file);
        for (function, line, lines) in long_functions(&text) {
            if !known(&name, &function) {
                over.push(format!("{name}:{line} fn {function}: {lines} lines"));
            }
        }
    }
    assert!(over.is_empty(), "functions over {MAX_FN_LINES} lines:\n{}", over.join("\n"));
}

#[test]
fn every_known_exception_is_still_over() {
    let mut all = Vec::new();
    files(&src(), &mut all);
    for (file, function, _) in KNOWN {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = fs::read_to_string(&path).unwrap_or_default();
        let still = if function.is_empty() {
            text.lines().count() > MAX_FILE_LINES
        } else {
            long_functions(&text).iter().any(|(name, _, _)| name == function)
        };
        assert!(still, "{file} {function} is within the limits now: remove it from KNOWN");
    }
}

#[test]
fn the_counter_sees_functions_and_skips_tests() {
    let body = "    let x = 1;\n".repeat(MAX_FN_LINES);
    let text = format!(
        "pub(crate) async fn long() {{\n{body}}}\n\
         fn short() {{ let s = \"}}\"; }}\n\
         impl A {{\n    pub fn inner(&self) {{\n{body}    }}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn helper() {{\n{body}    }}\n}}\n"
    );
    let found: Vec<(String, usize)> = long_functions(&text).into_iter().map(|(n, _, l)| (n, l)).collect();
    assert_eq!(found, [("long".to_string(), MAX_FN_LINES + 2), ("inner".to_string(), MAX_FN_LINES + 2)]);
}
