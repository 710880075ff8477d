//! A TCP front between a client and `redis-server` that counts the client's round trips
//! carrying one command (e.g. `EVALSHA`), and nothing else.
//!
//! Per connection, bytes the client sends after bytes came back to it start a new *turn*;
//! a turn is counted once if it carries the command (as RESP sends it: `$7\r\nEVALSHA\r\n`,
//! any case). So a request whose commands went out together is one turn however many
//! commands or TCP reads it took, and a client that awaited each reply makes one turn per
//! command. Connection set-up (`HELLO`, `AUTH`, `SELECT`, `CLIENT SETINFO`, `SCRIPT LOAD`),
//! health checks and other clients are not counted, whatever their number or order; unlike
//! Redis's `total_reads_processed`, which counts every read of every client.
//!
//! The front runs on its own thread and runtime, so a test may block on it.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// A running front; stops (and closes every connection through it) on drop.
pub struct RoundTripFront {
    addr: SocketAddr,
    turns: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl RoundTripFront {
    /// Listens on a free loopback port and forwards every connection to `upstream`,
    /// counting turns that carry `command`.
    pub fn start(upstream: SocketAddr, command: &str) -> RoundTripFront {
        let listener = StdListener::bind("127.0.0.1:0").expect("bind the front");
        listener.set_nonblocking(true).expect("nonblocking listener");
        let addr = listener.local_addr().expect("front addr");
        let turns = Arc::new(AtomicU64::new(0));
        let pattern: Arc<[u8]> =
            format!("${}\r\n{}\r\n", command.len(), command).to_ascii_lowercase().into_bytes().into();
        let (stop, stopped) = oneshot::channel();
        let counter = turns.clone();
        let thread = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("tokio listener");
                let mut connections = JoinSet::new();
                let accept = async {
                    loop {
                        let Ok((client, _)) = listener.accept().await else { continue };
                        connections.spawn(forward(client, upstream, pattern.clone(), counter.clone()));
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
                // Dropping the set aborts every connection task: both sockets close.
            });
        });
        RoundTripFront { addr, turns, stop: Some(stop), thread: Some(thread) }
    }

    /// The URL a Redis client uses to go through the front.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Turns that carried the command, over all connections since the start.
    pub fn turns(&self) -> u64 {
        self.turns.load(Ordering::SeqCst)
    }
}

impl Drop for RoundTripFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One client connection: both directions until either side closes.
async fn forward(client: TcpStream, upstream: SocketAddr, pattern: Arc<[u8]>, turns: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Set when bytes go back to the client: its next bytes start a new turn.
    let replied = Arc::new(AtomicBool::new(true));
    tokio::join!(
        requests(client_read, server_write, replied.clone(), &pattern, &turns),
        replies(server_read, client_write, replied),
    );
}

/// Client → server, counting turns that carry the pattern.
async fn requests(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    replied: Arc<AtomicBool>,
    pattern: &[u8],
    turns: &AtomicU64,
) {
    let mut buf = vec![0u8; 64 * 1024];
    // The turn's bytes seen so far, lowercased (the pattern may straddle two reads).
    let mut turn: Vec<u8> = Vec::new();
    let mut counted = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if replied.swap(false, Ordering::SeqCst) {
            turn.clear();
            counted = false;
        }
        if !counted {
            // Only the tail that could start a match is kept from earlier reads.
            let keep = turn.len().min(pattern.len().saturating_sub(1));
            turn.drain(..turn.len() - keep);
            turn.extend(buf[..n].iter().map(u8::to_ascii_lowercase));
            if turn.windows(pattern.len()).any(|w| w == pattern) {
                counted = true;
                turns.fetch_add(1, Ordering::SeqCst);
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// Server → client, marking that the client got an answer.
async fn replies(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, replied: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Before the write: the client's next bytes, sent once it has read these, must
        // find the mark (set after, a fast client could race it and merge two turns).
        replied.store(true, Ordering::SeqCst);
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
