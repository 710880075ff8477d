//! Showing request bytes to people: one escaped text form for logs, `explain` and metric
//! labels, and its inverse for `explain`'s input.
//!
//! Descriptor values are bytes (Envoy forwards header bytes ≥ 0x80 as they come). The text
//! form keeps printable UTF-8 text as it is and writes a byte that is not part of valid
//! UTF-8, or an ASCII control character, as `\xNN` (two lowercase hex digits), a character
//! that does not display as itself (C1 controls, zero-width and bidirectional marks, BOM,
//! private use, non-characters: `hidden`) as `\u{NNNN}`, and a backslash as `\\`. That is
//! injective — the bytes `ff`, `fe` and the text `\xff` show as `\xff`, `\xfe` and `\\xff` —
//! so two values never share a label or a line, and no value can reorder or hide what a log
//! line or label shows. Printable text (nearly every value) is borrowed, not copied.
//! Metric labels (`metrics::label`) use the same rule, with truncation. Pure: no I/O.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The text form of `bytes` (see the module doc); borrowed when nothing needs escaping.
pub fn escape(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !text.chars().any(needs_escape) {
            return Cow::Borrowed(text);
        }
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c);
        }
        for &byte in chunk.invalid() {
            push_byte(&mut out, byte);
        }
    }
    Cow::Owned(out)
}

/// Appends `c` in its text form.
pub fn push_char(out: &mut String, c: char) {
    // Writing to a String cannot fail.
    match c {
        '\\' => out.push_str("\\\\"),
        c if c.is_ascii_control() => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if hidden(c) => {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Appends a byte that is not part of valid UTF-8 in its text form.
pub fn push_byte(out: &mut String, byte: u8) {
    let _ = write!(out, "\\x{byte:02x}");
}

fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_ascii_control() || (!c.is_ascii() && hidden(c))
}

/// Non-ASCII characters that do not display as themselves: C1 controls, format characters
/// (soft hyphen, zero-width, bidirectional marks and overrides, BOM, …), separators other
/// than space, private use and non-characters.
pub(crate) fn hidden(c: char) -> bool {
    let n = c as u32;
    c.is_control()
        || matches!(
            n,
            0x00ad
                | 0x034f
                | 0x061c
                | 0x115f..=0x1160
                | 0x17b4..=0x17b5
                | 0x180b..=0x180f
                | 0x200b..=0x200f
                | 0x2028..=0x202e
                | 0x2060..=0x206f
                | 0x3164
                | 0xfe00..=0xfe0f
                | 0xfeff
                | 0xffa0
                | 0xfff0..=0xfffb
                | 0xe000..=0xf8ff
                | 0xe0000..=0xe0fff
                | 0xf0000..=0x10ffff
        )
        || (n & 0xfffe) == 0xfffe
        || (0xfdd0..=0xfdef).contains(&n)
}

/// The bytes `text` shows, reading `\xNN` as the byte `NN` and `\` before any other
/// character as that character (so `\\` is a backslash, and callers may give meaning to
/// their own escapes such as `\,` first). The inverse of `escape`.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut utf8 = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            continue;
        }
        match chars.next() {
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                let byte = (hex.len() == 2).then(|| u8::from_str_radix(&hex, 16).ok()).flatten();
                out.push(byte.ok_or_else(|| format!("`\\x{hex}` in {text:?}: `\\x` takes two hex digits"))?);
            }
            Some('u') if chars.clone().next() == Some('{') => {
                chars.next();
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                let c = c.ok_or_else(|| format!("`\\u{{{hex}}}` in {text:?}: not a character"))?;
                let mut utf8 = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
            Some(other) => {
                let mut utf8 = [0; 4];
                out.extend_from_slice(other.encode_utf8(&mut utf8).as_bytes());
            }
            None => return Err(format!("{text:?} ends with a lone `\\`")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn text_is_borrowed_and_bytes_are_escaped() {
        assert!(matches!(escape(b"alice"), Cow::Borrowed("alice")));
        assert!(matches!(escape("ä/*".as_bytes()), Cow::Borrowed("ä/*")));
        assert_eq!(escape(b"\xff"), "\\xff");
        assert_eq!(escape(b"a\xff\xfeb"), "a\\xff\\xfeb");
        assert_eq!(escape(b"\\xff"), "\\\\xff");
        assert_eq!(escape(b"a\nb\x7f"), "a\\x0ab\\x7f");
        // A truncated multi-byte character: its bytes, not a replacement character.
        assert_eq!(escape(&"ä".as_bytes()[..1]), "\\xc3");
        // Characters that would hide or reorder what a line shows.
        assert_eq!(escape("a\u{202e}b\u{200b}".as_bytes()), "a\\u{202e}b\\u{200b}");
        assert_eq!(escape("\u{85}".as_bytes()), "\\u{0085}");
    }

    #[test]
    fn distinct_bytes_never_share_a_text() {
        let values: [&[u8]; 5] = [b"\xff", b"\xfe", b"\\xff", b"\xef\xbf\xbd", b"\\\\xff"];
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                assert_ne!(escape(a), escape(b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn unescape_reports_bad_escapes() {
        assert_eq!(unescape("a\\,b").as_deref(), Ok(&b"a,b"[..]));
        assert!(unescape("\\xZZ").is_err());
        assert!(unescape("\\x4").is_err());
        assert!(unescape("end\\").is_err());
    }

    proptest! {
        #[test]
        fn unescape_inverts_escape(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(unescape(&escape(&bytes)), Ok(bytes));
        }
    }
}
