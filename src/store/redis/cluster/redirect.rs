//! Redirects on a Redis Cluster: one command of one slot sent alone, following `MOVED`
//! (the map is updated), `ASK` (once more, after `ASKING`), `TRYAGAIN` (after a short
//! pause) and `READONLY` (to the new master, after a map refresh) until a node runs it,
//! and a `NOSCRIPT` once more with `EVAL`. Each of those replies means the command did not
//! run, so sending it again cannot charge twice; nothing else is re-sent.

use std::sync::Arc;
use std::time::Duration;

use redis::{Pipeline, Value};
use tokio::time::Instant;

use super::super::super::charge::StoreError;
use super::super::scripts::Call;
use super::super::slots::{Node, Redirect};
use super::shared::{Lane, Shared};

/// Redirects one charge may follow before it is a store error.
const MAX_REDIRECTS: usize = 5;
/// Pause before sending a `TRYAGAIN` command again.
const TRYAGAIN_PAUSE: Duration = Duration::from_millis(5);

impl Shared {
    /// One command of `slot` (`build` appends it, by SHA or with its source) sent alone on
    /// `lane`, counted as `weight` commands in flight — or, with `reply`, starting from a
    /// reply `node` already gave it — following redirects until a node runs it; a
    /// `NOSCRIPT` goes once more with the source. What charges, `DEL` and approximate
    /// mode's sync share: a redirected command did not run, so sending it again is safe.
    pub(super) async fn send_alone(
        self: &Arc<Self>,
        slot: u16,
        mut reply: Option<(Node, Value)>,
        lane: Lane,
        weight: usize,
        deadline: Instant,
        build: impl Fn(&mut Pipeline, Call),
    ) -> Result<Value, StoreError> {
        let mut node = match &reply {
            Some((node, _)) => node.clone(),
            None => match self.map.load().owner(slot) {
                Some(node) => node.clone(),
                None => self.refreshed_owner(slot, deadline).await?,
            },
        };
        let (mut asking, mut call) = (false, Call::Sha);
        for _ in 0..=MAX_REDIRECTS {
            let value = match reply.take() {
                Some((_, value)) => value,
                None => {
                    let mut pipe = Pipeline::with_capacity(2);
                    if asking {
                        pipe.add_command(redis::cmd("ASKING"));
                    }
                    build(&mut pipe, call);
                    let count = 1 + usize::from(asking);
                    let sent = match lane {
                        Lane::Charges => {
                            self.link(&node)
                                .send_weighted(pipe, count, weight + usize::from(asking), deadline)
                                .await
                        }
                        Lane::Sync => {
                            self.sync_link(&node)
                                .send_weighted(pipe, count, weight + usize::from(asking), deadline)
                                .await
                        }
                        Lane::Aside => self.link(&node).send_aside(pipe, count, deadline).await,
                    };
                    match sent {
                        Ok(mut values) => values.pop().unwrap_or(Value::Nil),
                        Err(e) => {
                            self.failed(&e);
                            return Err(e.into());
                        }
                    }
                }
            };
            match Redirect::of(&value, &node.0) {
                None => return Ok(value),
                Some(Redirect::NoScript) if call == Call::Sha => call = Call::Source,
                Some(Redirect::NoScript) => return Ok(value),
                Some(redirect) => self.follow(redirect, slot, &mut node, &mut asking, deadline).await?,
            }
        }
        Err(StoreError::Server(format!("more than {MAX_REDIRECTS} cluster redirects for slot {slot}")))
    }

    /// Where a command of `slot` that got `redirect` goes next (`node`, and whether after
    /// `ASKING`): a `MOVED` updates the map, a `TRYAGAIN` pauses, a `READONLY` asks for the
    /// new master. Such a command did not run, so it may be sent again. (`NOSCRIPT` is the
    /// caller's: it changes the command, not the node.)
    async fn follow(
        self: &Arc<Self>,
        redirect: Redirect,
        slot: u16,
        node: &mut Node,
        asking: &mut bool,
        deadline: Instant,
    ) -> Result<(), StoreError> {
        match redirect {
            Redirect::Moved { slot, node: to } => {
                self.map.store(Arc::new(self.map.load().with_owner(slot, to.clone())));
                self.start_refresh(false);
                (*node, *asking) = (to, false);
            }
            Redirect::Ask { node: to } => (*node, *asking) = (to, true),
            Redirect::TryAgain => {
                let pause = Instant::now() + TRYAGAIN_PAUSE;
                if pause >= deadline {
                    return Err(StoreError::Timeout);
                }
                tokio::time::sleep_until(pause).await;
            }
            Redirect::ReadOnly => *node = self.refreshed_owner(slot, deadline).await?,
            Redirect::NoScript => {}
        }
        Ok(())
    }
}
