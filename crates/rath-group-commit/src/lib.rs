//! The group-commit lane: one task per lane takes every write waiting for a store, does them
//! in one transaction through the store's [`Group`], and answers each writer; a group that
//! fails as a whole is done again a write at a time, so a bad write fails alone.
//!
//! ```
//! use rath_group_commit::{Group, Lane, LaneOptions};
//!
//! /// A "store" that sums numbers and refuses negative ones.
//! struct Sums(Vec<i64>);
//!
//! impl Group for Sums {
//!     type Job = (i64, tokio::sync::oneshot::Sender<Result<i64, String>>);
//!     type Answer = i64;
//!     type Error = String;
//!
//!     async fn together(&mut self, jobs: &[Self::Job]) -> Result<Vec<Result<i64, String>>, String> {
//!         if jobs.iter().any(|(n, _)| *n < 0) {
//!             return Err("a negative number".into()); // nothing of the group is kept
//!         }
//!         Ok(jobs.iter().map(|(n, _)| { self.0.push(*n); Ok(*n) }).collect())
//!     }
//!
//!     async fn alone(&mut self, (n, _): &Self::Job) -> Result<i64, String> {
//!         if *n < 0 { return Err(format!("{n} is negative")) }
//!         self.0.push(*n);
//!         Ok(*n)
//!     }
//!
//!     fn answer(&mut self, (_, reply): Self::Job, answer: Result<i64, String>) {
//!         let _ = reply.send(answer);
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let lane = Lane::spawn(Sums(Vec::new()), LaneOptions::default());
//! let (a, b) = (tokio::sync::oneshot::channel(), tokio::sync::oneshot::channel());
//! lane.send((2, a.0)).unwrap();
//! lane.send((-1, b.0)).unwrap();
//! assert_eq!(a.1.await.unwrap(), Ok(2));
//! assert_eq!(b.1.await.unwrap(), Err("-1 is negative".to_owned()));
//! # });
//! ```

#![warn(missing_docs)]

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;

/// A store's side of group commit: how a group of writes is done in one transaction, how one
/// write is done alone, and how a writer is told.
pub trait Group: Send + 'static {
    /// One write waiting for the lane (with whatever its writer waits on).
    type Job: Send + 'static;
    /// What a write's writer is told when it committed.
    type Answer: Send;
    /// What a write, or a whole group, fails with.
    type Error: Send;

    /// Does every job in one transaction, in order, each seeing the ones before it: one
    /// answer per job. A job refused by itself (a stale fence token) may be answered with its
    /// error while the others commit; `Err` means nothing of the group was kept.
    fn together(&mut self, jobs: &[Self::Job]) -> impl Future<Output = Answers<Self>> + Send;

    /// Does one job in a transaction of its own (after its group failed).
    fn alone(
        &mut self,
        job: &Self::Job,
    ) -> impl Future<Output = Result<Self::Answer, Self::Error>> + Send;

    /// Tells the job's writer its outcome.
    fn answer(&mut self, job: Self::Job, answer: Result<Self::Answer, Self::Error>);

    /// True while the store keeps a connection between groups (the lane then gives it back
    /// after [`LaneOptions::keep_idle`] without a write).
    fn holds_connection(&self) -> bool {
        false
    }

    /// Gives back the connection kept between groups, if any: after a quiet spell, after a
    /// failed group (so a broken connection is not used twice) and when the store closes.
    fn release(&mut self) {}

    /// Resolves when the store is closing, so the lane gives its connection back at once
    /// (a pool's close waits for every connection); never, by default.
    fn closing(&self) -> impl Future<Output = ()> + Send + 'static {
        std::future::pending()
    }

    /// True when a one-job group that failed is done again alone: the default, for stores
    /// whose group path differs from their one-write path; a store whose two paths are the
    /// same says no, and the job gets the group's error.
    fn redo_single(&self) -> bool {
        true
    }
}

/// What [`Group::together`] gives: one outcome per job, or the group's failure.
pub type Answers<G> =
    Result<Vec<Result<<G as Group>::Answer, <G as Group>::Error>>, <G as Group>::Error>;

/// How a lane batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneOptions {
    /// Jobs one group takes at most.
    pub max: usize,
    /// How long a kept connection stays without a write to do (taking one from a pool
    /// again tests it with a round trip, which on a loaded server waits its turn).
    pub keep_idle: Duration,
}

impl Default for LaneOptions {
    /// 128 jobs a group, a connection kept one second.
    fn default() -> Self {
        Self {
            max: 128,
            keep_idle: Duration::from_secs(1),
        }
    }
}

impl LaneOptions {
    /// At most `max` jobs a group (at least one).
    pub fn max(mut self, max: usize) -> Self {
        self.max = max.max(1);
        self
    }

    /// A kept connection given back after `keep_idle` without a write.
    pub fn keep_idle(mut self, keep_idle: Duration) -> Self {
        self.keep_idle = keep_idle;
        self
    }
}

/// A running lane: the task that commits a store's writes in groups.
#[derive(Debug)]
pub struct Lane;

impl Lane {
    /// Starts a lane for `group` on the current tokio runtime; jobs sent on the returned
    /// channel are done in groups, in the order sent. The lane ends when every sender is
    /// gone (after answering what it took).
    pub fn spawn<G: Group>(group: G, options: LaneOptions) -> mpsc::UnboundedSender<G::Job> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(group, rx, options));
        tx
    }
}

/// The lane's loop: wait for a job, take every job waiting, commit them as a group.
async fn run<G: Group>(mut group: G, mut rx: mpsc::UnboundedReceiver<G::Job>, opts: LaneOptions) {
    let mut jobs = Vec::with_capacity(opts.max.min(1024));
    while let Some(first) = next(&mut group, &mut rx, opts.keep_idle).await {
        jobs.push(first);
        while jobs.len() < opts.max {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        commit(&mut group, &mut jobs).await;
    }
}

/// The next job; a kept connection goes back once none came for `keep_idle`, or at once
/// when the store closes. `None` once every sender is gone.
async fn next<G: Group>(
    group: &mut G,
    rx: &mut mpsc::UnboundedReceiver<G::Job>,
    keep_idle: Duration,
) -> Option<G::Job> {
    if !group.holds_connection() {
        return rx.recv().await;
    }
    let closing = group.closing();
    tokio::select! {
        next = rx.recv() => return next,
        () = tokio::time::sleep(keep_idle) => {}
        () = closing => {}
    }
    group.release();
    rx.recv().await
}

/// Commits `jobs` (drained) as one group, or each alone when the group fails, and answers
/// every one: what a lane does with the jobs it finds waiting (tests call it to do one
/// group of their choosing).
pub async fn commit<G: Group>(group: &mut G, jobs: &mut Vec<G::Job>) {
    match group.together(jobs).await {
        Ok(answers) => {
            for (job, answer) in jobs.drain(..).zip(answers) {
                group.answer(job, answer);
            }
        }
        Err(e) => {
            group.release();
            if jobs.len() == 1 && !group.redo_single() {
                if let Some(job) = jobs.pop() {
                    group.answer(job, Err(e));
                }
                return;
            }
            for job in jobs.drain(..) {
                let answer = group.alone(&job).await;
                group.answer(job, answer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::sync::oneshot;

    /// Records the groups it is given; a job of 0 fails any group it is in, and alone.
    struct Recorder {
        groups: Groups,
        released: Arc<Mutex<u32>>,
        holding: bool,
        single: bool,
    }

    type Job = (u32, oneshot::Sender<Result<u32, String>>);

    impl Group for Recorder {
        type Job = Job;
        type Answer = u32;
        type Error = String;

        async fn together(&mut self, jobs: &[Job]) -> Result<Vec<Result<u32, String>>, String> {
            self.holding = true;
            let ns: Vec<u32> = jobs.iter().map(|j| j.0).collect();
            self.groups.lock().unwrap().push(ns.clone());
            if ns.contains(&0) {
                return Err("group has a zero".into());
            }
            Ok(ns.into_iter().map(Ok).collect())
        }

        async fn alone(&mut self, job: &Job) -> Result<u32, String> {
            self.groups.lock().unwrap().push(vec![job.0]);
            if job.0 == 0 {
                Err("zero".into())
            } else {
                Ok(job.0)
            }
        }

        fn answer(&mut self, job: Job, answer: Result<u32, String>) {
            let _ = job.1.send(answer);
        }

        fn holds_connection(&self) -> bool {
            self.holding
        }

        fn release(&mut self) {
            self.holding = false;
            *self.released.lock().unwrap() += 1;
        }

        fn redo_single(&self) -> bool {
            self.single
        }
    }

    /// The groups a recorder was given, shared with the test.
    type Groups = Arc<Mutex<Vec<Vec<u32>>>>;

    fn recorder(single: bool) -> (Recorder, Groups, Arc<Mutex<u32>>) {
        let groups = Arc::new(Mutex::new(Vec::new()));
        let released = Arc::new(Mutex::new(0));
        let r = Recorder {
            groups: groups.clone(),
            released: released.clone(),
            holding: false,
            single,
        };
        (r, groups, released)
    }

    #[tokio::test]
    async fn waiting_jobs_commit_as_one_group_and_a_failed_group_is_redone_alone() {
        let (r, groups, released) = recorder(true);
        // Jobs sent before the lane first runs (a current-thread runtime) are one group.
        let lane = Lane::spawn(r, LaneOptions::default().max(3));
        let mut waits = Vec::new();
        for n in [1, 2, 0, 4, 5] {
            let (tx, rx) = oneshot::channel();
            lane.send((n, tx)).unwrap();
            waits.push(rx);
        }
        let mut got = Vec::new();
        for w in waits {
            got.push(w.await.unwrap());
        }
        assert_eq!(got, [Ok(1), Ok(2), Err("zero".to_owned()), Ok(4), Ok(5)]);
        // At most three a group; the failed one redone a job at a time.
        assert_eq!(
            *groups.lock().unwrap(),
            [vec![1, 2, 0], vec![1], vec![2], vec![0], vec![4, 5]]
        );
        // The failed group gave its connection back.
        assert_eq!(*released.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_one_job_group_that_failed_gets_the_groups_error_when_the_store_says_so() {
        let (r, groups, _) = recorder(false);
        let lane = Lane::spawn(r, LaneOptions::default());
        let (tx, rx) = oneshot::channel();
        lane.send((0, tx)).unwrap();
        assert_eq!(rx.await.unwrap(), Err("group has a zero".to_owned()));
        assert_eq!(*groups.lock().unwrap(), [vec![0]]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_connection_goes_back_after_a_quiet_spell() {
        let (r, _, released) = recorder(true);
        let lane = Lane::spawn(r, LaneOptions::default().keep_idle(Duration::from_secs(1)));
        let (tx, rx) = oneshot::channel();
        lane.send((7, tx)).unwrap();
        assert_eq!(rx.await.unwrap(), Ok(7));
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert_eq!(*released.lock().unwrap(), 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(*released.lock().unwrap(), 1);
        drop(lane);
    }
}
