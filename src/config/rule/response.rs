//! A limit's `response` (`DenialResponse`): the body and headers a denied client gets, their
//! bounds, and the `Template` their text is parsed into and rendered from.
//!
//! Part of `rule`; imports none of its siblings. Pure.

/// A limit's `response`: what the client of a request it denies gets, as the RLS answer's
/// `raw_body` and `response_headers_to_add` (Envoy sends them as the 429's body and
/// headers). Validated and bounded by `compile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenialResponse {
    pub body: Option<Template>,
    /// Sent as `content-type` (Envoy lets it replace its own `text/plain`).
    pub content_type: Option<String>,
    /// Lower-case names, in file order.
    pub headers: Vec<(String, Template)>,
}

/// The longest `response.body`, in bytes as written (a rendered number adds at most 20).
pub const MAX_RESPONSE_BODY: usize = 4096;
/// The most `response.headers`.
pub const MAX_RESPONSE_HEADERS: usize = 16;
/// The longest header value and `content_type`, as written.
pub const MAX_RESPONSE_VALUE: usize = 512;

/// Text with placeholders for the denying limit's numbers, and nothing else: `{limit}`
/// (`requests_per_unit`), `{window}` (the window in seconds, `unit × unit_multiplier`),
/// `{reset}` (seconds until the request would pass). Every other brace is literal text (a
/// JSON body needs no escaping); a `{word}` naming none of the three (letters, digits and
/// `_`, such as a misspelt `{limt}`) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Limit,
    Window,
    Reset,
}

impl Template {
    /// Parses `text`; a placeholder-like `{word}` that is none of the three is an error in
    /// words.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('{') {
            literal.push_str(&rest[..at]);
            let tail = &rest[at..];
            let word = tail[1..]
                .find('}')
                .map(|end| &tail[1..=end])
                .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
            let Some(word) = word else {
                literal.push('{');
                rest = &tail[1..];
                continue;
            };
            let piece = match word {
                "limit" => Piece::Limit,
                "window" => Piece::Window,
                "reset" => Piece::Reset,
                other => {
                    return Err(format!(
                        "unknown placeholder {{{other}}} (expected {{limit}}, {{window}} or {{reset}})"
                    ))
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
            rest = &tail[word.len() + 2..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template(pieces))
    }

    /// The text with the denying limit's numbers in place.
    pub fn render(&self, limit: u64, window: u64, reset: u64) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Limit => out.push_str(&limit.to_string()),
                Piece::Window => out.push_str(&window.to_string()),
                Piece::Reset => out.push_str(&reset.to_string()),
            }
        }
        out
    }
}
