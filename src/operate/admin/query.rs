//! The parameters of `/v1/usage` and `/v1/reset`: `domain` and `descriptor`, read from the
//! raw query string as bytes.
//!
//! Each parameter is percent-decoded to bytes (`+` is a space, as in HTML forms), never
//! through lossy UTF-8: a descriptor value Envoy sends as raw bytes ≥ 0x80 can be named
//! exactly. `descriptor` then has `tollgate explain --descriptor`'s syntax (`k=v,k2=v2`,
//! `\,` and `\=` escape, `\xNN` a byte) and is split by explain's own parser. Pure.

use std::str::FromStr;

use crate::operate::explain::DescriptorArg;

/// A parsed `domain` + `descriptor` pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The domain as bytes (not UTF-8: no configured domain has that name).
    pub domain: Vec<u8>,
    /// The descriptor's entries in order, as bytes.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Parses a raw query string (`None`: no `?`). The error names the problem.
pub fn parse(raw: Option<&str>) -> Result<Target, String> {
    let (mut domain, mut descriptor) = (None, None);
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value)?;
        match decode(name)?.as_slice() {
            b"domain" => domain = Some(value),
            b"descriptor" => descriptor = Some(value),
            _ => {}
        }
    }
    let domain = domain.filter(|d| !d.is_empty()).ok_or("missing query parameter `domain`")?;
    let descriptor = descriptor.ok_or("missing query parameter `descriptor` (k=v,k2=v2)")?;
    let entries =
        DescriptorArg::from_str(&as_arg_text(&descriptor)).map_err(|e| format!("bad descriptor: {e}"))?.0;
    Ok(Target { domain, entries })
}

/// Descriptors `/v1/explain` takes in one request, at most (a request's worth).
pub const MAX_EXPLAINED: usize = 64;

/// The parameters of `/v1/explain`: one `domain` and one or more `descriptor`s (a
/// request's descriptors, in order), each in `--descriptor` syntax.
pub fn parse_explain(raw: Option<&str>) -> Result<(String, Vec<DescriptorArg>), String> {
    let (mut domain, mut descriptors) = (None, Vec::new());
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value)?;
        match decode(name)?.as_slice() {
            b"domain" => domain = Some(value),
            b"descriptor" if descriptors.len() == MAX_EXPLAINED => {
                return Err(format!("more than {MAX_EXPLAINED} descriptors"));
            }
            b"descriptor" => descriptors.push(
                DescriptorArg::from_str(&as_arg_text(&value)).map_err(|e| format!("bad descriptor: {e}"))?,
            ),
            _ => {}
        }
    }
    let domain = domain.filter(|d| !d.is_empty()).ok_or("missing query parameter `domain`")?;
    if descriptors.is_empty() {
        return Err("missing query parameter `descriptor` (k=v,k2=v2; repeat it for each descriptor)".into());
    }
    // Configured domains are UTF-8: another name explains as unknown, shown escaped.
    Ok((String::from_utf8_lossy(&domain).into_owned(), descriptors))
}

/// Percent-decoding to bytes; `+` is a space.
pub fn decode(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(byte.ok_or_else(|| format!("bad percent-encoding at byte {i} of {text:?}"))?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// The descriptor bytes as text for explain's parser: valid UTF-8 as it is, every other
/// byte as `\xNN`, which the parser reads back as that byte. A `\` escaping such a byte
/// is dropped (an escaped byte is the byte), so the result means exactly the bytes given.
fn as_arg_text(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut escaping = false;
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            out.push(c);
            escaping = c == '\\' && !escaping;
        }
        for &byte in chunk.invalid() {
            if escaping {
                out.pop();
                escaping = false;
            }
            crate::telemetry::escape::push_byte(&mut out, byte);
        }
    }
    out
}

/// Percent-encodes `bytes` for a query value: unreserved characters as they are, every
/// other byte as `%XX` (what `tollgate usage` / `tollgate reset` send).
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A descriptor's entries in `--descriptor` syntax, as bytes: `\`, `,` and `=` in keys
/// and values escaped with `\`, every other byte as it is. `parse` reads it back exactly.
pub fn descriptor_bytes(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let push = |out: &mut Vec<u8>, part: &[u8]| {
        for &b in part {
            if matches!(b, b'\\' | b',' | b'=') {
                out.push(b'\\');
            }
            out.push(b);
        }
    };
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push(&mut out, key);
        out.push(b'=');
        push(&mut out, value);
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn entries(pairs: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    #[test]
    fn explain_takes_every_descriptor_in_order_and_a_bounded_number() {
        let (domain, descriptors) =
            parse_explain(Some("domain=api&descriptor=user%3Dal&descriptor=ip%3D1%2Cpath%3D%2F"))
                .expect("ok");
        assert_eq!(domain, "api");
        let got: Vec<_> = descriptors.into_iter().map(|d| d.0).collect();
        assert_eq!(got, [entries(&[(b"user", b"al")]), entries(&[(b"ip", b"1"), (b"path", b"/")])]);
        assert!(parse_explain(Some("domain=api")).is_err_and(|e| e.contains("descriptor")));
        assert!(parse_explain(Some("descriptor=a%3Db")).is_err_and(|e| e.contains("domain")));
        let many = format!("domain=api{}", "&descriptor=a%3Db".repeat(MAX_EXPLAINED + 1));
        assert!(parse_explain(Some(&many)).is_err_and(|e| e.contains("more than")));
    }

    #[test]
    fn a_query_decodes_to_bytes_and_splits_like_explain() {
        let target = parse(Some("domain=api&descriptor=user%3Dal%5C%2Cice%2Cip%3D%FF%FE")).expect("ok");
        assert_eq!(target.domain, b"api");
        // `%5C%2C` is `\,`: an escaped comma inside the value.
        assert_eq!(target.entries, entries(&[(b"user", b"al,ice"), (b"ip", b"\xff\xfe")]));
    }

    #[test]
    fn raw_bytes_and_escapes_survive() {
        let target = parse(Some("descriptor=user%3Da%5C%3Db%2Cip%3D%FF%5C%FE&domain=api")).expect("ok");
        assert_eq!(target.entries, entries(&[(b"user", b"a=b"), (b"ip", b"\xff\xfe")]));
        let target = parse(Some("domain=api&descriptor=k%3Da+b")).expect("ok");
        assert_eq!(target.entries, entries(&[(b"k", b"a b")]));
    }

    #[test]
    fn problems_are_named() {
        let err = |q: &str| parse(Some(q)).expect_err(q);
        assert!(err("descriptor=k%3Dv").contains("domain"));
        assert!(err("domain=api").contains("descriptor"));
        assert!(err("domain=api&descriptor=novalue").contains("key=value"));
        assert!(err("domain=api&descriptor=%3Dv").contains("empty key"));
        assert!(err("domain=api&descriptor=k%3D%ZZ").contains("percent"));
        assert!(err("domain=api&descriptor=k%3Dv%5Cx4").contains("\\x"));
    }

    proptest! {
        #[test]
        fn what_the_cli_encodes_the_server_reads_back(
            pairs in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 1..8), proptest::collection::vec(any::<u8>(), 0..8)),
                1..4,
            )
        ) {
            let query = format!("domain=api&descriptor={}", encode(&descriptor_bytes(&pairs)));
            let target = parse(Some(&query)).expect("parses");
            prop_assert_eq!(target.entries, pairs);
        }
    }
}
