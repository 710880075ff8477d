//! One RLQS stream: one Envoy's usage reports for one filter domain, answered for as long
//! as Envoy keeps the stream open.
//!
//! A task of its own per stream (never a request future: nothing shared waits on a
//! future that may be dropped) reads the reports and answers each with one response
//! carrying an action for every bucket it can answer. The same task answers, at any time,
//! what no report asked: a window's edge or a DENY_ALL's refill (a wake-up it set), and a
//! push from another stream of this instance whose newcomer took part of this Envoy's
//! share (`Streams::push`).
//!
//! Bounds: [`MAX_STREAMS`] per instance (past it `RESOURCE_EXHAUSTED`, the one case a
//! stream is refused), `Bounds::max_buckets` buckets per stream and per report,
//! [`MAX_USAGES_PER_SECOND`] per stream, [`CONCURRENCY`] buckets assigned at once; what is
//! past a bound, and a bad bucket id, is counted, logged once per stream and reason, and
//! never ends the stream.
//!
//! The stream ends when Envoy ends it, at the drain and after `--grpc-max-connection-age`
//! (±10 %), with OK: Envoy opens a new one at its next 5 s report, to any instance, and
//! reports the gap's usage there; claims and usage are in the store, nothing is lost.
//! Ending, it releases its shares (`Quota::release`): its demand stops weighing at once,
//! its claims expire with their TTL.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

use super::quota::{Answer, Ask, Assignment, Held, Quota};
use book::Book;
pub use book::NAMED_PREFIX;
use inbox::{Lines, Push};
pub use wait::MAX_USAGES_PER_SECOND;
use wait::{sleep_until, stopped, Budget};

mod book;
pub mod inbox;
mod wait;
use super::wire::{self, Bounds, BucketKey, RateLimitQuotaUsageReports};

/// Streams one instance holds at most.
pub const MAX_STREAMS: usize = 10_000;
/// Buckets of one report assigned concurrently.
pub const CONCURRENCY: usize = 32;
/// Responses waiting to be written to one stream; a stream that falls further behind
/// drops pushes (a report is always answered: the task waits for room).
const OUTBOX: usize = 64;

/// What the instance's streams share: the assignment logic, the count of streams and the
/// way to reach each holder's stream.
#[derive(Debug)]
pub struct Streams {
    quota: Arc<Quota>,
    bounds: Bounds,
    open: AtomicUsize,
    /// Each live holder's wake-up line, by holder name.
    /// (An Envoy with two filter domains opens two streams under one name.)
    pushes: Lines,
    shutdown: watch::Receiver<bool>,
    max_age: Option<Duration>,
    /// Every open stream's book, for the status view.
    views: Mutex<HashMap<u64, Arc<Mutex<Book>>>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl Streams {
    /// `max_age`: `--grpc-max-connection-age`, after which (±10 %) a stream ends.
    /// On a shared store, starts reading this instance's inbox (`inbox::poll`): call it
    /// inside the runtime.
    pub fn new(quota: Quota, shutdown: watch::Receiver<bool>, max_age: Option<Duration>) -> Streams {
        let (quota, pushes) = (Arc::new(quota), Lines::default());
        if quota.store().is_shared() {
            tokio::spawn(inbox::poll(quota.clone(), pushes.clone(), shutdown.clone()));
        }
        Streams {
            quota,
            bounds: Bounds::default(),
            open: AtomicUsize::new(0),
            pushes,
            shutdown,
            max_age,
            views: Mutex::new(HashMap::new()),
            next_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Starts a stream for `holder`, reading `inbound`; answers the outbound side, or
    /// `RESOURCE_EXHAUSTED` at [`MAX_STREAMS`].
    pub fn start<S>(
        self: &Arc<Self>,
        holder: String,
        inbound: S,
    ) -> Result<mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>, Status>
    where
        S: futures_util::Stream<Item = Result<RateLimitQuotaUsageReports, Status>> + Send + Unpin + 'static,
    {
        if self.open.fetch_add(1, Ordering::AcqRel) >= MAX_STREAMS {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.quota.metrics().rlqs().stream_refused();
            return Err(Status::resource_exhausted("this instance holds its maximum of RLQS streams"));
        }
        self.quota.metrics().rlqs().stream(1);
        let (out, answers) = mpsc::channel(OUTBOX);
        let (push, pushed) = mpsc::channel(OUTBOX);
        inbox::register(&self.pushes, &holder, &push);
        let book =
            Arc::new(Mutex::new(Book { holder: holder.clone(), domain: None, buckets: HashMap::new() }));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.views.lock().unwrap_or_else(PoisonError::into_inner).insert(id, book.clone());
        let task = Stream {
            streams: self.clone(),
            holder,
            domain: None,
            book,
            id,
            budget: Budget::new(Instant::now()),
            wakes: BTreeSet::new(),
            wake_of: HashMap::new(),
            logged: HashSet::new(),
            out,
            push,
        };
        tokio::spawn(task.run(inbound, pushed));
        Ok(answers)
    }

    /// The assignment logic (and its ledger) the streams share.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Calls `each(holder, domain, bucket, held)` for every bucket of every open stream.
    pub fn view(&self, each: impl FnMut(&str, &str, &BucketKey, &Held)) {
        let books: Vec<Arc<Mutex<Book>>> =
            self.views.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        book::view(&books, each);
    }
}

/// The task of one stream.
struct Stream {
    streams: Arc<Streams>,
    holder: String,
    /// The domain of the first report (Envoy sends one per stream).
    domain: Option<String>,
    /// Its buckets, shared with the status view (`Streams::view`); locked briefly, never
    /// across an await.
    book: Arc<Mutex<Book>>,
    /// Its key in `Streams::views`.
    id: u64,
    /// Bucket usages it may still send now (`MAX_USAGES_PER_SECOND`).
    budget: Budget,
    /// Wake-ups by instant, and each bucket's (one per bucket).
    wakes: BTreeSet<(Instant, BucketKey)>,
    wake_of: HashMap<BucketKey, Instant>,
    /// Reasons already logged on this stream (one line per reason).
    logged: HashSet<&'static str>,
    out: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    /// This stream's own push line (kept to tell it from a newer stream of the same name).
    push: mpsc::Sender<Push>,
}

impl Stream {
    async fn run<S>(mut self, mut inbound: S, mut pushed: mpsc::Receiver<Push>)
    where
        S: futures_util::Stream<Item = Result<RateLimitQuotaUsageReports, Status>> + Send + Unpin + 'static,
    {
        let mut shutdown = self.streams.shutdown.clone();
        let age = self.streams.max_age.map(|age| age.mul_f64(rand::random_range(0.9..=1.1)));
        let ends = age.map(|age| Instant::now() + age);
        loop {
            let next_wake = self.wakes.first().map(|(at, _)| *at);
            tokio::select! {
                biased;
                _ = stopped(&mut shutdown) => break,
                _ = sleep_until(ends) => break,
                report = inbound.next() => match report {
                    Some(Ok(report)) => self.report(report).await,
                    Some(Err(status)) => {
                        tracing::debug!(holder = %self.holder, status = %status, "RLQS stream failed");
                        break;
                    }
                    None => break,
                },
                Some(push) = pushed.recv() => self.pushed(push).await,
                _ = sleep_until(next_wake) => {
                    let now = Instant::now();
                    let mut due = Vec::new();
                    while let Some((at, _)) = self.wakes.first() {
                        if *at > now {
                            break;
                        }
                        let (_, key) = self.wakes.pop_first().expect("just seen");
                        self.wake_of.remove(&key);
                        due.push((key, true));
                    }
                    self.again(due).await;
                }
            }
            if self.out.is_closed() {
                break;
            }
        }
        self.end().await;
    }

    /// Answers one report: every bucket it can, in one response.
    async fn report(&mut self, report: RateLimitQuotaUsageReports) {
        let streams = self.streams.clone();
        let metrics = streams.quota.metrics().rlqs();
        metrics.reports(report.bucket_quota_usages.len() as u64);
        // Envoy sends every bucket once per 5 s (and one at each bucket's creation): a
        // stream sending more than MAX_USAGES_PER_SECOND is not Envoy keeping time.
        let count = report.bucket_quota_usages.len();
        if !self.budget.take(count, Instant::now()) {
            let message = "an RLQS stream sends reports faster than its bound: the excess is not answered";
            return self.refuse("too_many_reports", count, message);
        }
        let Some(domain) = report.domain().map(str::to_owned) else {
            let message = "an RLQS report's domain is not UTF-8: its buckets are not answered";
            return self.refuse("not_utf8", count, message);
        };
        if self.domain.is_none() {
            self.domain = Some(domain.clone());
            self.book().domain = Some(domain.clone());
        }
        let bounds = self.streams.bounds;
        // Each bucket once per report, its counts summed.
        let mut asks: Vec<(BucketKey, Ask)> = Vec::new();
        let mut index: HashMap<BucketKey, usize> = HashMap::new();
        for usage in &report.bucket_quota_usages {
            let key = match BucketKey::new(usage.bucket_id.as_ref(), &bounds) {
                Ok(key) => key,
                Err(invalid) => {
                    let reason = invalid.reason();
                    metrics.invalid(reason);
                    self.log_once(reason, &format!("an RLQS bucket id is not answered: {invalid}"));
                    continue;
                }
            };
            let ask = Ask::Report {
                allowed: usage.num_requests_allowed,
                denied: usage.num_requests_denied,
                immediate: usage.is_immediate(),
            };
            match index.get(&key) {
                Some(&i) => asks[i].1.add(ask),
                None => {
                    let (known, count) = {
                        let book = self.book();
                        (book.buckets.contains_key(&key), book.buckets.len())
                    };
                    if !known && count + index.len() >= bounds.max_buckets {
                        metrics.invalid("too_many_buckets");
                        self.log_once(
                            "too_many_buckets",
                            "an RLQS stream holds its maximum of buckets: new ones are not answered",
                        );
                        continue;
                    }
                    index.insert(key.clone(), asks.len());
                    asks.push((key, ask));
                }
            }
        }
        self.answer(&domain, asks).await;
    }

    /// A push: the bucket named, or every bucket of the ledger key named.
    async fn pushed(&mut self, push: Push) {
        let keys = match push {
            Push::Bucket(key) => vec![(key, false)],
            Push::Ledger(ledger) => {
                let book = self.book();
                let held =
                    book.buckets.iter().filter(|(_, held)| held.ledger.as_deref() == Some(ledger.as_str()));
                held.map(|(key, _)| (key.clone(), false)).collect()
            }
        };
        self.again(keys).await;
    }

    /// Looks at `keys` again (pushes, wake-ups): `(key, fresh)`.
    async fn again(&mut self, keys: Vec<(BucketKey, bool)>) {
        let Some(domain) = self.domain.clone() else { return };
        let asks = keys
            .into_iter()
            .filter(|(key, _)| self.book().buckets.contains_key(key))
            .map(|(key, fresh)| (key, Ask::Again { fresh }))
            .collect();
        self.answer(&domain, asks).await;
    }

    /// Assigns every ask, at most [`CONCURRENCY`] at once, and sends one response.
    async fn answer(&mut self, domain: &str, asks: Vec<(BucketKey, Ask)>) {
        if asks.is_empty() {
            return;
        }
        let quota = self.streams.quota.clone();
        let holder = self.holder.clone();
        let work: Vec<(BucketKey, Held, Ask)> = asks
            .into_iter()
            .map(|(key, ask)| {
                let held = self.book().buckets.get(&key).cloned().unwrap_or_default();
                (key, held, ask)
            })
            .collect();
        let answered: Vec<(BucketKey, Held, Answer)> = futures_util::stream::iter(work)
            .map(|(key, mut held, ask)| {
                let (quota, holder) = (quota.clone(), holder.clone());
                async move {
                    let answer = quota.assign(domain, &key, &holder, &mut held, ask).await;
                    (key, held, answer)
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut actions = Vec::new();
        let mut shrinks = Vec::new();
        let now = Instant::now();
        for (key, held, answer) in answered {
            let answer_assignment = answer.actions.last().and_then(Assignment::of);
            if let Some(at) = self.wake_of.remove(&key) {
                self.wakes.remove(&(at, key.clone()));
            }
            let ledger = held.ledger.clone();
            shrinks.push((answer.shrink, key.clone(), ledger));
            actions.extend(answer.actions);
            if answer.forget {
                if self.book().buckets.remove(&key).is_some() {
                    self.streams.quota.metrics().rlqs().buckets(-1);
                }
                continue;
            }
            if let Some(wake) = answer.wake {
                self.wakes.insert((now + wake, key.clone()));
                self.wake_of.insert(key.clone(), now + wake);
            }
            let mut held = held;
            held.assignment = answer_assignment.or(held.assignment);
            if self.book().buckets.insert(key, held).is_none() {
                self.streams.quota.metrics().rlqs().buckets(1);
            }
        }
        if !actions.is_empty() {
            // A report is always answered: wait for room (Envoy reads as it can).
            let _ = self.out.send(Ok(wire::response(actions))).await;
        }
        for (shrink, key, ledger) in shrinks.iter().filter(|(shrink, ..)| !shrink.is_empty()) {
            inbox::shrink(&self.streams.quota, &self.streams.pushes, shrink, key, ledger.as_deref()).await;
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `count` usages of a report not answered for `reason`.
    fn refuse(&mut self, reason: &'static str, count: usize, message: &str) {
        self.streams.quota.metrics().rlqs().invalid_by(reason, count as u64);
        self.log_once(reason, message);
    }

    fn log_once(&mut self, reason: &'static str, message: &str) {
        if self.logged.insert(reason) {
            tracing::warn!(holder = %self.holder, reason, "{message}");
        }
    }

    /// Releases every share this stream held and forgets the stream.
    async fn end(self) {
        inbox::unregister(&self.streams.pushes, &self.holder, &self.push);
        let quota = &self.streams.quota;
        let holder = &self.holder;
        let named = holder.starts_with(NAMED_PREFIX);
        self.streams.views.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
        let held: Vec<(BucketKey, Held)> = self.book().buckets.drain().collect();
        let count = held.len();
        futures_util::stream::iter(held.iter())
            .filter_map(|(_, held)| async move { held.ledger.as_ref().map(|key| (key, held)) })
            .for_each_concurrent(CONCURRENCY, |(key, held)| quota.release(key, holder, named, held))
            .await;
        quota.metrics().rlqs().buckets(-(count as i64));
        quota.metrics().rlqs().stream(-1);
        self.streams.open.fetch_sub(1, Ordering::AcqRel);
    }
}
