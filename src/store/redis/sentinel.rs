//! The Redis Sentinel store: the single-node store's behaviour on whichever node the
//! sentinels name as master.
//!
//! Every connection of the lifecycle (`link`) is made to the address the sentinels give at
//! that moment (the first sentinel that answers), with the credentials, database and TLS
//! mode of `--redis-url`. Requests are charged as on a single node (`server`: batched
//! script calls, or with `--no-batch` one pipeline of `EVALSHA` per request), with the
//! usual single `EVAL` retry of `NOSCRIPT` entries, by each request's deadline.
//!
//! After a failover the old master may be gone (its connections close or fall silent: the
//! lifecycle replaces them), a replica (`READONLY`: taken out for good), or — for the
//! seconds until the sentinels reconfigure it — still a master accepting writes that nobody
//! else sees. So a background task also asks the sentinels every second which node is
//! master and renews every connection when the answer changes. Until the sentinels promote
//! a replica, charges fail and take their domain's failure policy. Replication is
//! asynchronous: counts the old master had not yet sent are lost.

use std::fmt;
use std::sync::{Arc, Once, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::ConnectionInfo;
use tokio::time::Instant;

use super::super::charge::{Charge, Groups, Reservation, Reserved, StoreError};
use super::super::remote::{Charged, Remote, Reset};
use super::connect::{client, connection_info, node_url, redact_url, with_address};
use super::link::{Connect, Link, LinkSettings, Replaced};
use super::server::Server;
use super::tls::Tls;

/// How often the sentinels are asked which node is master.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// How to reach a master through Redis Sentinel.
#[derive(Clone)]
pub struct SentinelSettings {
    /// The master's name in the sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// Sentinels: `host:port` or `redis://[user:password@]host:port`.
    pub sentinels: Vec<String>,
    /// Credentials, database and TLS for the master (its host is ignored): `--redis-url`.
    pub master_url: Option<String>,
    /// The CA and client certificate for a `rediss://` master and `rediss://` sentinels.
    pub tls: Tls,
    /// How connections to the master are kept.
    pub link: LinkSettings,
    /// Requests queued for the master go together (`redis::batch`); false: `--no-batch`.
    pub batch: bool,
}

impl fmt::Debug for SentinelSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSettings")
            .field("master", &self.master)
            .field("sentinels", &self.sentinels.iter().map(|s| redact_url(s)).collect::<Vec<_>>())
            .field("master_url", &self.master_url.as_deref().map(redact_url))
            .field("link", &self.link)
            .field("batch", &self.batch)
            .finish()
    }
}

/// Sentinel-backed store.
pub struct SentinelStore {
    server: Server,
    master: String,
    sentinels: Sentinels,
    watching: Once,
    description: String,
}

impl fmt::Debug for SentinelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelStore").field("sentinel", &self.description).finish_non_exhaustive()
    }
}

impl SentinelStore {
    /// Builds the store. Connects lazily: sentinels or master down at startup is not an error.
    pub fn new(settings: &SentinelSettings) -> Result<SentinelStore, StoreError> {
        if settings.sentinels.is_empty() {
            return Err(StoreError::Unavailable("no sentinels given".into()));
        }
        let urls: Vec<String> = settings.sentinels.iter().map(|s| node_url(s)).collect();
        let master_url = settings.master_url.as_deref().unwrap_or("redis://127.0.0.1:6379/");
        let template = connection_info(master_url, &settings.tls)?;
        let infos = urls.iter().map(|url| connection_info(url, &settings.tls)).collect::<Result<_, _>>()?;
        let sentinels = Sentinels { infos, tls: settings.tls.clone() };
        let connect = connect_to_master(template.clone(), sentinels.clone(), settings.master.clone());
        let shown: Vec<String> = urls.iter().map(|u| redact_url(u)).collect();
        let description = format!("{} via {}", settings.master, shown.join(","));
        let sync_connect = connect_to_master(template, sentinels.clone(), settings.master.clone());
        let server = Server::new(
            settings.link,
            description.clone(),
            description.clone(),
            connect,
            sync_connect,
            settings.batch,
        );
        Ok(SentinelStore {
            server,
            master: settings.master.clone(),
            sentinels,
            watching: Once::new(),
            description,
        })
    }

    /// Decides window consumes by `windows` (`--redis-windows`; `lua` unless called).
    pub fn with_windows(mut self, windows: super::plain::Windows) -> SentinelStore {
        self.server.set_windows(windows);
        self
    }

    /// `master via sentinel,sentinel`, without passwords.
    pub fn description(&self) -> String {
        self.description.clone()
    }

    /// Which path decides window consumes (`--redis-windows`).
    pub fn windows(&self) -> super::plain::Windows {
        self.server.windows()
    }

    /// Whether the last call reached the master.
    pub fn is_healthy(&self) -> bool {
        self.server.is_healthy()
    }

    /// Connections replaced since the start, by reason.
    pub fn replaced(&self) -> Replaced {
        self.server.replaced()
    }

    /// The master's connections charges ride (approximate mode's first reads of a bucket).
    pub(crate) fn link(&self) -> &Link {
        self.server.link()
    }

    /// Approximate mode's own connection to the master; starts the watch of the sentinels
    /// if no charge has.
    pub(crate) fn sync_link(&self) -> &Link {
        self.watch();
        self.server.sync_link()
    }

    /// Starts, once, the task that follows a master switch (both links).
    fn watch(&self) {
        self.watching.call_once(|| {
            let links = vec![Arc::downgrade(self.server.link()), Arc::downgrade(self.server.sync_link())];
            tokio::spawn(watch_master(links, self.sentinels.clone(), self.master.clone()));
        });
    }
}

/// Each connect asks the sentinels for the master's address, then connects there with
/// the master URL's credentials, database and TLS mode.
/// The sentinels to ask, and the TLS files of their connections and the master's.
#[derive(Clone)]
struct Sentinels {
    infos: Vec<ConnectionInfo>,
    tls: Tls,
}

fn connect_to_master(template: ConnectionInfo, sentinels: Sentinels, master: String) -> Connect {
    Arc::new(move |config| {
        let (template, sentinels, master) = (template.clone(), sentinels.clone(), master.clone());
        Box::pin(async move {
            let mut conns = vec![None; sentinels.infos.len()];
            let Some((host, port)) = ask_sentinels(&sentinels, &mut conns, &master).await else {
                return Err(StoreError::Unavailable(format!("no sentinel knows master {master}")));
            };
            let client = client(&with_address(&template, &host, port), &sentinels.tls)?;
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map_err(|e| StoreError::Unavailable(e.to_string()))
        })
    })
}

/// Until the store is dropped: asks the sentinels which node is master every
/// `WATCH_PERIOD` and drops every kept connection when the answer changes.
async fn watch_master(links: Vec<Weak<Link>>, sentinels: Sentinels, master: String) {
    let mut conns: Vec<Option<MultiplexedConnection>> = vec![None; sentinels.infos.len()];
    let mut known: Option<(String, u16)> = None;
    let mut tick = tokio::time::interval(WATCH_PERIOD);
    loop {
        tick.tick().await;
        let answer = ask_sentinels(&sentinels, &mut conns, &master).await;
        let links: Vec<Arc<Link>> = links.iter().filter_map(Weak::upgrade).collect();
        if links.is_empty() {
            return;
        }
        let Some(now) = answer else { continue };
        if let Some(before) = known.as_ref().filter(|before| **before != now) {
            tracing::warn!(
                master = %master,
                from = %format!("{}:{}", before.0, before.1),
                to = %format!("{}:{}", now.0, now.1),
                "the sentinels switched master; reconnecting"
            );
            links.iter().for_each(|link| link.renew());
        }
        known = Some(now);
    }
}

/// The master's address from the first sentinel that knows it (connections kept).
async fn ask_sentinels(
    sentinels: &Sentinels,
    conns: &mut [Option<MultiplexedConnection>],
    master: &str,
) -> Option<(String, u16)> {
    let limit = WATCH_PERIOD / 2;
    for (info, conn) in sentinels.infos.iter().zip(conns.iter_mut()) {
        if conn.is_none() {
            let client = client(info, &sentinels.tls).ok()?;
            let made = tokio::time::timeout(limit, client.get_multiplexed_async_connection()).await;
            *conn = made.ok().and_then(Result::ok);
        }
        let Some(c) = conn.as_mut() else { continue };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("GET-MASTER-ADDR-BY-NAME").arg(master);
        match tokio::time::timeout(limit, cmd.query_async::<Option<(String, u16)>>(c)).await {
            Ok(Ok(Some(addr))) => return Some(addr),
            Ok(Ok(None)) => {}
            _ => *conn = None,
        }
    }
    None
}

impl Remote for SentinelStore {
    async fn charge(&self, batch: &[Charge], groups: &Groups, deadline: Instant) -> Charged {
        self.watch();
        self.server.charge_groups(batch, groups, deadline).await
    }

    fn renew(&self) {
        self.server.renew();
    }

    async fn reserve(
        &self,
        group: &[Charge],
        reservation: &Reservation,
        deadline: Instant,
    ) -> Result<Reserved, StoreError> {
        self.server.reserve(group, reservation, deadline).await
    }
}

impl Reset for SentinelStore {
    async fn reset(&self, keys: &[String], deadline: Instant) -> Result<(), StoreError> {
        self.server.delete(keys, deadline).await
    }

    async fn command(
        &self,
        _key: &str,
        command: redis::Cmd,
        deadline: Instant,
    ) -> Result<redis::Value, StoreError> {
        self.server.command(command, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
        let s = SentinelSettings {
            master: "mymaster".into(),
            sentinels: vec!["redis://:s3cret@h:26379".into()],
            master_url: Some("redis://:m4ster@h:6379".into()),
            tls: Tls::default(),
            link: crate::store::redis::RedisSettings::new("redis://h").link(Duration::from_millis(10)),
            batch: true,
        };
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("m4ster") && shown.contains("mymaster"),
            "{shown}"
        );
    }
}
