//! `tollgate usage` and `tollgate reset`: call `/v1/usage` and `/v1/reset` of a running
//! server and hand back its JSON. Their arguments (`AdminCall`) live here, below the CLI,
//! which embeds them as the two subcommands.
//!
//! One HTTP/1.1 request per call over a plain TCP connection (hyper's client connection:
//! it reads answers by length, chunks or to close): the admin port is plain HTTP, on
//! loopback by default, so no TLS. `https://` is refused with a message; reach a remote
//! admin port through a tunnel (`kubectl port-forward`). The descriptor travels as
//! `--descriptor`'s syntax, every byte percent-encoded (`query::encode`), so values that are
//! not UTF-8 arrive exactly.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONNECTION, CONTENT_LENGTH, HOST};
use hyper::Method;
use hyper_util::rt::TokioIo;
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
        Verb::Usage => (Method::GET, "/v1/usage"),
        Verb::Reset => (Method::POST, "/v1/reset"),
    };
    let target = format!(
        "{path}?domain={}&descriptor={}",
        encode(domain.as_bytes()),
        encode(&descriptor_bytes(&descriptor.0))
    );
    let (status, body) = within_timeout(authority, exchange(authority, method, &target, token)).await?;
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
    match within_timeout(authority, exchange(authority, Method::GET, &target, None)).await? {
        (200, body) => Ok(body),
        (status, body) => Err(format!("HTTP {status}: {}", body.trim())),
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

/// `call` or its error, by [`CALL_TIMEOUT`].
async fn within_timeout(
    authority: &str,
    call: impl std::future::Future<Output = Result<(u16, String), String>>,
) -> Result<(u16, String), String> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| format!("{authority}: no answer within {} s", CALL_TIMEOUT.as_secs()))?
}

/// One request (`Connection: close`, an empty body) and the whole answer: its status and
/// its body as text.
async fn exchange(
    authority: &str,
    method: Method,
    target: &str,
    token: Option<&str>,
) -> Result<(u16, String), String> {
    let failed = |e: &dyn std::fmt::Display| format!("{authority}: {e}");
    let stream = TcpStream::connect(authority).await.map_err(|e| failed(&e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| failed(&e))?;
    // The connection is driven beside the request; it ends with the answer (close).
    let driver = tokio::spawn(connection);
    let mut request = hyper::Request::builder()
        .method(method.clone())
        .uri(target)
        .header(HOST, authority)
        .header(CONNECTION, "close");
    if method == Method::POST {
        request = request.header(CONTENT_LENGTH, "0");
    }
    if let Some(token) = token {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(Empty::<Bytes>::new()).map_err(|e| failed(&e))?;
    let answer = async {
        let response = sender.send_request(request).await.map_err(|e| failed(&e))?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.map_err(|e| failed(&e))?.to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
    .await;
    driver.abort();
    answer
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

    /// Serves `answer` once on a free loopback port and says where.
    async fn answering(answer: &'static [u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut head = [0u8; 1024];
            let _ = stream.read(&mut head).await;
            let _ = stream.write_all(answer).await;
        });
        address
    }

    #[tokio::test]
    async fn answers_read_by_length_chunks_or_close() {
        let at = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await;
        assert_eq!(exchange(&at, Method::GET, "/", None).await, Ok((200, "{}".into())));
        let at = answering(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )
        .await;
        assert_eq!(exchange(&at, Method::GET, "/", None).await, Ok((404, "abcde".into())));
        let at = answering(b"HTTP/1.1 503 x\r\nconnection: close\r\n\r\nbody").await;
        assert_eq!(exchange(&at, Method::POST, "/", Some("t")).await, Ok((503, "body".into())));
        let at = answering(b"garbage\r\n\r\n").await;
        assert!(exchange(&at, Method::GET, "/", None).await.is_err());
    }
}
