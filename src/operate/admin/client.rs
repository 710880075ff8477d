//! `tollgate usage` and `tollgate reset`: call `/v1/usage` and `/v1/reset` of a running
//! server and hand back its JSON. Their arguments (`AdminCall`) live here, below the CLI,
//! which embeds them as the two subcommands.
//!
//! A minimal HTTP/1.1 client over a plain TCP connection (one request, `Connection:
//! close`): the admin port is plain HTTP, on loopback by default, so no TLS and no HTTP
//! library are needed. `https://` is refused with a message; reach a remote admin port
//! through a tunnel (`kubectl port-forward`). The descriptor travels as
//! `--descriptor`'s syntax, every byte percent-encoded (`query::encode`), so values that are
//! not UTF-8 arrive exactly.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::operate::explain::DescriptorArg;

use super::query::{descriptor_bytes, encode};

/// The longest one call may take, connection included.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `tollgate usage|reset [--admin ADDR] --domain D --descriptor k=v[,k=v…] [--token-file F]`:
/// prints the server's JSON; exits non-zero with the server's message on an HTTP error.
#[derive(Debug, Args)]
pub struct AdminCall {
    /// The server's admin address: `host:port` or `http://host:port` (plain HTTP only).
    #[arg(long, env = "TOLLGATE_ADMIN_URL", default_value = "127.0.0.1:9102")]
    pub admin: String,
    /// The descriptor's domain.
    #[arg(long)]
    pub domain: String,
    /// The descriptor as `key=value,key=value`, as `explain` takes it (`\,` for a comma,
    /// `\=` for an equals sign, `\xNN` for a byte).
    #[arg(long)]
    pub descriptor: DescriptorArg,
    /// A file holding the server's admin token (sent as `Authorization: Bearer`).
    #[arg(long, env = "TOLLGATE_ADMIN_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
}

/// Which endpoint to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `GET /v1/usage`.
    Usage,
    /// `POST /v1/reset`.
    Reset,
}

/// Calls the endpoint of `verb` on the admin server at `admin` (`host:port` or
/// `http://host:port`); `token`: sent as `Authorization: Bearer`. The body on a 2xx
/// answer, else `HTTP <status>: <the server's error>`.
pub async fn call(
    verb: Verb,
    admin: &str,
    domain: &str,
    descriptor: &DescriptorArg,
    token: Option<&str>,
) -> Result<String, String> {
    let authority = authority(admin)?;
    let (method, path) = match verb {
        Verb::Usage => ("GET", "/v1/usage"),
        Verb::Reset => ("POST", "/v1/reset"),
    };
    let target = format!(
        "{path}?domain={}&descriptor={}",
        encode(domain.as_bytes()),
        encode(&descriptor_bytes(&descriptor.0))
    );
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: 0\r\n{auth}\r\n"
    );
    let raw = tokio::time::timeout(CALL_TIMEOUT, exchange(authority, head.as_bytes()))
        .await
        .map_err(|_| format!("{authority}: no answer within {} s", CALL_TIMEOUT.as_secs()))?
        .map_err(|e| format!("{authority}: {e}"))?;
    let (status, body) = parse_response(&raw).ok_or_else(|| format!("{authority}: malformed HTTP answer"))?;
    if (200..300).contains(&status) {
        return Ok(body);
    }
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| body.trim().to_string());
    Err(format!("HTTP {status}: {message}"))
}

/// `tollgate explain --from ADMIN`: `GET /v1/explain` of the server at `admin`, the
/// explanation against what it serves.
pub async fn explain(admin: &str, domain: &str, descriptors: &[DescriptorArg]) -> Result<String, String> {
    let authority = authority(admin)?;
    let mut target = format!("/v1/explain?domain={}", encode(domain.as_bytes()));
    for descriptor in descriptors {
        target.push_str(&format!("&descriptor={}", encode(&descriptor_bytes(&descriptor.0))));
    }
    let head = format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    let raw = tokio::time::timeout(CALL_TIMEOUT, exchange(authority, head.as_bytes()))
        .await
        .map_err(|_| format!("{authority}: no answer within {} s", CALL_TIMEOUT.as_secs()))?
        .map_err(|e| format!("{authority}: {e}"))?;
    match parse_response(&raw) {
        Some((200, body)) => Ok(body),
        Some((status, body)) => Err(format!("HTTP {status}: {}", body.trim())),
        None => Err(format!("{authority}: malformed HTTP answer")),
    }
}

/// `tollgate usage` / `tollgate reset`: prints the server's JSON, or its error and fails.
pub async fn run(verb: Verb, args: &AdminCall) -> std::process::ExitCode {
    let token = match args.token_file.as_deref().map(read_token).transpose() {
        Ok(token) => token,
        Err(e) => {
            eprintln!("tollgate: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match call(verb, &args.admin, &args.domain, &args.descriptor, token.as_deref()).await {
        Ok(body) => {
            println!("{}", body.trim_end());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tollgate: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Reads a token file as the server does (surrounding whitespace is not part of it).
pub fn read_token(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// `host:port` of `http://host:port[/]` or `host:port`.
fn authority(admin: &str) -> Result<&str, String> {
    if admin.starts_with("https://") {
        return Err("https is not supported: the admin port speaks plain HTTP (use a tunnel)".into());
    }
    let rest = admin.strip_prefix("http://").unwrap_or(admin).trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || !rest.contains(':') {
        return Err(format!("--admin {admin:?}: expected host:port or http://host:port"));
    }
    Ok(rest)
}

async fn exchange(authority: &str, head: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(authority).await?;
    stream.write_all(head).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    Ok(raw)
}

/// Status and body of a whole HTTP/1.1 answer (`Content-Length`, chunked, or to close).
fn parse_response(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_ascii_lowercase())
        })
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        dechunk(body)?
    } else {
        match header("content-length") {
            Some(n) => body.get(..n.parse::<usize>().ok()?)?.to_string(),
            None => body.to_string(),
        }
    };
    Some((status, body))
}

fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_addresses_are_plain_http_host_and_port() {
        assert_eq!(authority("127.0.0.1:9102"), Ok("127.0.0.1:9102"));
        assert_eq!(authority("http://localhost:9102/"), Ok("localhost:9102"));
        assert!(authority("https://h:1").is_err_and(|e| e.contains("https")));
        assert!(authority("http://h:1/v1").is_err());
        assert!(authority("localhost").is_err());
    }

    #[test]
    fn answers_parse_by_length_chunks_or_close() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}extra";
        assert_eq!(parse_response(plain), Some((200, "{}".into())));
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked), Some((404, "abcde".into())));
        assert_eq!(parse_response(b"HTTP/1.1 503 x\r\n\r\nbody"), Some((503, "body".into())));
        assert_eq!(parse_response(b"garbage"), None);
    }
}
