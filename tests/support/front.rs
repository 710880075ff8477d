//! A TCP front between Tollgate and Redis, run inside a test, that can produce the faults a
//! Kubernetes Service, a cloud "primary endpoint" or a NAT in the path produces.
//!
//! The front listens on a free loopback port and forwards every accepted connection to its
//! current target. It runs on a thread and a runtime of its own, so it keeps working whatever
//! the test's runtime does (blocked, paused, shutting down).
//! Controls, callable from any thread at any time:
//! - `set_target`: new connections go to the new address; open ones keep their upstream
//!   (a failover behind a stable address).
//! - `silence_existing`: every connection open now swallows bytes in both directions from
//!   now on, and is never closed (no FIN, no RST): a conntrack entry dropped, a dead VM.
//!   The client's kernel still sees its writes acknowledged (by the front's kernel), so only
//!   "no reply for too long" can tell such a connection is dead, not TCP keepalive.
//! - `delay_first_bytes`: on connections accepted from now on, bytes from Redis are held
//!   until that long after the accept (a slow TLS/AUTH set-up across zones).
//! - `add_latency`: every reply chunk is held that long before it is forwarded.
//! - counters: connections accepted, bytes forwarded each way, bytes swallowed.
//!
//! Dropping the front stops its runtime and waits for it: once `drop` returns, the listener
//! and every connection are closed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// A running front owned by one test.
pub struct Front {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Ends the front's runtime when sent (or dropped).
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the controls change and the connections read.
#[derive(Default)]
struct Shared {
    target: Mutex<Option<SocketAddr>>,
    delay: Mutex<Duration>,
    /// Connections accepted before this many have been accepted in total are silenced: a
    /// connection's number is its place in accept order.
    silenced_below: AtomicU64,
    /// Replies are dropped and the client's connection closed instead (see `cut_replies`).
    cut: std::sync::atomic::AtomicBool,
    /// Added before every reply chunk is forwarded, in µs (`add_latency`).
    latency_us: AtomicU64,
    accepted: AtomicU64,
    to_redis: AtomicU64,
    to_client: AtomicU64,
    swallowed: AtomicU64,
}

/// Counters of a front, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrontStats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Bytes forwarded client → Redis.
    pub to_redis: u64,
    /// Bytes forwarded Redis → client.
    pub to_client: u64,
    /// Bytes read on silenced connections and dropped (either direction).
    pub swallowed: u64,
}

/// Which way a pump moves bytes.
#[derive(Clone, Copy)]
enum Direction {
    ToRedis,
    ToClient,
}

/// One accepted connection, as its pumps see it.
#[derive(Clone)]
struct Conn {
    shared: Arc<Shared>,
    number: u64,
    accepted_at: Instant,
    delay: Duration,
}

impl Conn {
    fn silenced(&self) -> bool {
        self.number < self.shared.silenced_below.load(Ordering::SeqCst)
    }
}

impl Front {
    /// Starts a front on a free loopback port forwarding to `target`.
    pub fn start(target: SocketAddr) -> Front {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the front");
        listener.set_nonblocking(true).expect("nonblocking listener");
        let addr = listener.local_addr().expect("front address");
        let shared = Arc::new(Shared { target: Mutex::new(Some(target)), ..Shared::default() });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().expect("front runtime");
        let accepting = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("test-front-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener).expect("front listener");
                    tokio::spawn(accept(listener, accepting));
                    let _ = stopped.await;
                });
                // Dropping a current-thread runtime drops every task on this thread, now:
                // the listener and all sockets close before `Front::drop` returns.
                drop(runtime);
            })
            .expect("front thread");
        Front { addr, shared, stop: Some(stop), thread: Some(thread) }
    }

    /// Starts a front to `127.0.0.1:port`.
    pub fn to_port(port: u16) -> Front {
        Front::start(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:PORT/` of the front.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// New connections go to `target`; open ones keep theirs.
    pub fn set_target(&self, target: SocketAddr) {
        *self.shared.target.lock().expect("front target") = Some(target);
    }

    /// New connections go to `127.0.0.1:port`.
    pub fn set_target_port(&self, port: u16) {
        self.set_target(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Every connection open now swallows bytes both ways from now on and is never closed;
    /// connections accepted later work normally.
    pub fn silence_existing(&self) {
        let accepted = self.shared.accepted.load(Ordering::SeqCst);
        self.shared.silenced_below.fetch_max(accepted, Ordering::SeqCst);
    }

    /// Connections accepted from now on get no byte from Redis before `delay` after their
    /// accept (`Duration::ZERO`: no delay).
    pub fn delay_first_bytes(&self, delay: Duration) {
        *self.shared.delay.lock().expect("front delay") = delay;
    }

    /// While `on`, a reply from Redis is not forwarded: the client's connection is closed
    /// instead — the command ran, the client saw its connection drop.
    pub fn cut_replies(&self, on: bool) {
        self.shared.cut.store(on, Ordering::SeqCst);
    }

    /// From now on every chunk of a reply, on every connection, is held `latency` before
    /// it is forwarded (`Duration::ZERO`: none): a latency spike on the path.
    pub fn add_latency(&self, latency: Duration) {
        self.shared.latency_us.store(latency.as_micros() as u64, Ordering::SeqCst);
    }

    /// The counters now.
    pub fn stats(&self) -> FrontStats {
        let s = &self.shared;
        FrontStats {
            accepted: s.accepted.load(Ordering::SeqCst),
            to_redis: s.to_redis.load(Ordering::SeqCst),
            to_client: s.to_client.load(Ordering::SeqCst),
            swallowed: s.swallowed.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else { continue };
        let conn = Conn {
            number: shared.accepted.fetch_add(1, Ordering::SeqCst),
            accepted_at: Instant::now(),
            delay: *shared.delay.lock().expect("front delay"),
            shared: shared.clone(),
        };
        let target = *shared.target.lock().expect("front target");
        tokio::spawn(async move {
            let Some(target) = target else { return };
            // Unreachable target: the client sees its connection closed, as behind a
            // Service without endpoints.
            let Ok(upstream) = TcpStream::connect(target).await else { return };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (redis_read, redis_write) = upstream.into_split();
            let up = tokio::spawn(pump(client_read, redis_write, conn.clone(), Direction::ToRedis));
            pump(redis_read, client_write, conn, Direction::ToClient).await;
            let _ = up.await;
        });
    }
}

/// Copies one direction until either side closes; swallows once the connection is silenced
/// (and then never closes anything, whatever the peers do).
async fn pump<R, W>(mut from: R, mut to: W, conn: Conn, direction: Direction)
where
    R: AsyncReadExt + Unpin,
    W: AsyncWriteExt + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if conn.silenced() {
            conn.shared.swallowed.fetch_add(n as u64, Ordering::SeqCst);
            continue;
        }
        if let Direction::ToClient = direction {
            if conn.shared.cut.load(Ordering::SeqCst) {
                conn.shared.swallowed.fetch_add(n as u64, Ordering::SeqCst);
                break;
            }
            tokio::time::sleep_until(conn.accepted_at + conn.delay).await;
            let latency = conn.shared.latency_us.load(Ordering::SeqCst);
            if latency > 0 {
                tokio::time::sleep(Duration::from_micros(latency)).await;
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        let counter = match direction {
            Direction::ToRedis => &conn.shared.to_redis,
            Direction::ToClient => &conn.shared.to_client,
        };
        counter.fetch_add(n as u64, Ordering::SeqCst);
    }
    if conn.silenced() {
        // A silent connection never closes: hold the write half open until the front stops.
        std::future::pending::<()>().await;
    }
    let _ = to.shutdown().await;
}
