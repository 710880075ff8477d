//! Plain HTTP/1.1 over `std::net`: a one-shot client (what a curl through Envoy sees) and a
//! tiny upstream that answers 200 and counts what reached it.
//!
//! Blocking on purpose: no runtime to share with the processes under test, nothing to
//! poll but sockets. Bodies are ignored beyond what the tests print.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What came back: status, headers (names lower-cased, in order) and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// Header `name` parsed as an integer; panics (with the response) when absent or not one.
    pub fn int_header(&self, name: &str) -> u64 {
        let value = self.header(name).unwrap_or_else(|| panic!("no {name} header in {self:#?}"));
        value.trim().parse().unwrap_or_else(|_| panic!("{name}: {value:?} is not an integer"))
    }
}

/// `GET path` to `addr` with extra headers, `Connection: close`; `Err` on any I/O failure.
pub fn try_get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Response> {
    let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    try_get_bytes(addr, path, &headers)
}

/// Like `try_get`, with header values as raw bytes: what a client that puts bytes ≥ 0x80
/// (not UTF-8) into a header sends on the wire.
pub fn try_get_bytes(addr: SocketAddr, path: &str, headers: &[(&str, &[u8])]) -> std::io::Result<Response> {
    request(addr, "GET", path, headers)
}

/// `POST path` with an empty body (an admin action such as Tollgate's `/reload`); panics on
/// I/O errors.
pub fn post(addr: SocketAddr, path: &str) -> Response {
    request(addr, "POST", path, &[("content-length", b"0".as_slice())])
        .unwrap_or_else(|e| panic!("POST http://{addr}{path}: {e}"))
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n").into_bytes();
    for (name, value) in headers {
        request.extend_from_slice(name.as_bytes());
        request.extend_from_slice(b": ");
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"\r\n");
    stream.write_all(&request)?;
    let raw = read_response(&mut stream)?;
    parse_response(&raw)
        .ok_or_else(|| std::io::Error::other(format!("bad response: {}", String::from_utf8_lossy(&raw))))
}

/// The response's bytes: up to the end of its `content-length` body when it has one, else
/// up to EOF. Not EOF always: Envoy keeps a connection it closes open for its
/// `delayed_close_timeout` (1 s) after answering, which would make every request a second.
fn read_response(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if expected_len(&raw).is_some_and(|total| raw.len() >= total) {
            return Ok(raw);
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(raw);
        }
        raw.extend_from_slice(&chunk[..n]);
    }
}

/// Head plus `content-length` bytes, once the whole head is in `raw` and names a length.
fn expected_len(raw: &[u8]) -> Option<usize> {
    let head_end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&raw[..head_end]);
    let (_, length) = head
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))?;
    Some(head_end + length.trim().parse::<usize>().ok()?)
}

/// Like `try_get`, panicking on I/O errors.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    try_get(addr, path, headers).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

fn parse_response(raw: &[u8]) -> Option<Response> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Response { status, headers, body: body.to_string() })
}

/// An upstream on a loopback port: `200 ok` with `x-upstream: hit` for every request (and
/// `x-tokens-used: N` for one that sent `x-tokens: N`; after `x-delay-ms: N` milliseconds
/// for one that sent it, a long LLM stream).
pub struct Upstream {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Upstream {
    pub fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counter, stopping) = (hits.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(stream) = stream {
                    let counter = counter.clone();
                    std::thread::spawn(move || serve_connection(stream, &counter));
                }
            }
        });
        Upstream { addr, hits, stop, accept: Some(accept) }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests that reached the upstream (a denied request never does).
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Answers every request on a keep-alive connection until the peer closes it.
fn serve_connection(stream: TcpStream, hits: &AtomicUsize) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    loop {
        let mut saw_request = false;
        // `x-tokens: N` in the request: the answer reports `x-tokens-used: N` (an LLM
        // upstream's usage, known only with its response).
        let mut tokens: Option<String> = None;
        let mut delay = Duration::ZERO;
        loop {
            // Bytes, not `read_line`: forwarded headers may hold bytes that are not UTF-8.
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == b"\r\n" && saw_request => break,
                Ok(_) => {
                    saw_request = true;
                    let text = String::from_utf8_lossy(&line);
                    if let Some((name, value)) = text.split_once(':') {
                        if name.trim().eq_ignore_ascii_case("x-tokens") {
                            tokens = Some(value.trim().to_string());
                        }
                        if name.trim().eq_ignore_ascii_case("x-delay-ms") {
                            delay = Duration::from_millis(value.trim().parse().unwrap_or(0));
                        }
                    }
                }
            }
        }
        hits.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(delay);
        let used = tokens.map(|n| format!("x-tokens-used: {n}\r\n")).unwrap_or_default();
        let reply = format!("HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-upstream: hit\r\n{used}\r\nok\n");
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so the thread sees the flag.
        if let Ok(s) = TcpStream::connect(self.addr) {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}
