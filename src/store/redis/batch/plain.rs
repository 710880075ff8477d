//! Batching with `--redis-windows plain`: a lane's call carries its riders' window consumes
//! as plain commands (`redis::plain`), every rider's in one pipeline, beside one script call
//! for the rest of their charges (GCRA, peeks, refunds, joint groups: whatever
//! `plain::split` keeps on a script). One write for many requests, as for scripts: at one
//! descriptor a request's own pipeline of four commands is a read and a write of Redis's
//! event loop to itself, which costs Redis more than the commands (docs/performance.md,
//! "Plain window commands").

use std::borrow::Cow;

use tokio::time::Instant;

use super::super::super::charge::{Charge, Groups};
use super::super::plain;
use super::{Batcher, Results};

/// Riders' charges cut in two, each side with where its results go (index into the
/// riders' charges in order).
#[derive(Default)]
struct Cut<'a> {
    plain: Vec<&'a Charge>,
    plain_at: Vec<usize>,
    rest: Vec<(Cow<'a, [Charge]>, Cow<'a, Groups>)>,
    rest_at: Vec<usize>,
}

impl<'a> Cut<'a> {
    /// Adds a rider's `batch` (with its `groups`) whose first charge is at `offset`.
    fn add(&mut self, batch: &'a [Charge], groups: &'a Groups, offset: usize) {
        let Some(split) = plain::split(batch, groups) else {
            self.rest.push((Cow::Borrowed(batch), Cow::Borrowed(groups)));
            self.rest_at.extend(offset..offset + batch.len());
            return;
        };
        for &i in &split.plain {
            self.plain.push(&batch[i]);
            self.plain_at.push(offset + i);
        }
        if !split.rest.is_empty() {
            let charges: Vec<Charge> = split.rest.iter().map(|&i| batch[i].clone()).collect();
            self.rest.push((Cow::Owned(charges), Cow::Owned(split.rest_groups)));
            self.rest_at.extend(split.rest.iter().map(|&i| offset + i));
        }
    }
}

impl Batcher {
    /// One call for `riders` with window consumes decided plain: their plain commands as
    /// one pipeline and the rest as [`send_scripts`](Batcher::send_scripts) sends it, both
    /// at once, by `deadline`. One result per charge, riders in order.
    pub(super) async fn send_mixed(&self, riders: &[(&[Charge], &Groups)], deadline: Instant) -> Results {
        let mut cut = Cut::default();
        let mut total = 0;
        for &(batch, groups) in riders {
            cut.add(batch, groups, total);
            total += batch.len();
        }
        if cut.plain.is_empty() {
            return self.send_scripts(riders, deadline).await;
        }
        let rest: Vec<(&[Charge], &Groups)> =
            cut.rest.iter().map(|(c, g)| (c.as_ref(), g.as_ref())).collect();
        let plain = plain::charge(&self.link, &self.scripts, &cut.plain, deadline);
        let scripts = async {
            match rest.is_empty() {
                true => Vec::new(),
                false => self.send_scripts(&rest, deadline).await,
            }
        };
        let (plain, scripts) = tokio::join!(plain, scripts);
        plain::scatter(total, [(&cut.plain_at, plain), (&cut.rest_at, scripts)])
    }
}
