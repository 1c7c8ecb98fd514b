//! The combinators: [`Sequence`], the [`Parallel`] fan-out and [`LoopUntil`], each a
//! [`Workflow`] of workflows that resumes where a stop or a crash left it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use rath_session::{ChunkBody, Session, Stamper, Usage};
use serde_json::Value;

use crate::FlowError;
use crate::context::{FlowContext, branch_stamper};
use crate::error::{FailedAt, fail_from};
use crate::resume::{self, Branch};
use crate::workflow::{SharedWorkflow, Workflow, WorkflowRole};

/// Steps run one after another, each on the previous one's output. Stops early when a step
/// leaves pending work (an approval stop), returning that session.
#[derive(Clone)]
pub struct Sequence {
    name: String,
    description: String,
    steps: Vec<SharedWorkflow>,
}

impl fmt::Debug for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sequence")
            .field("name", &self.name)
            .field(
                "steps",
                &self
                    .steps
                    .iter()
                    .map(|s| s.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Sequence {
    /// An empty sequence named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            steps: Vec::new(),
        }
    }

    /// Sets the description.
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Appends a step.
    pub fn then(mut self, step: impl Workflow + 'static) -> Self {
        self.steps.push(Arc::new(step));
        self
    }

    /// Appends a shared step.
    pub fn then_shared(mut self, step: SharedWorkflow) -> Self {
        self.steps.push(step);
        self
    }

    /// The context step `i` runs in: inside a `LoopUntil` or a `Parallel`, one level deeper
    /// at this step (so a loop cut off in it names the step); at the top, `cx` itself.
    fn step_cx<'c>(&self, cx: &'c FlowContext, i: usize) -> std::borrow::Cow<'c, FlowContext> {
        if cx.position().is_empty() {
            std::borrow::Cow::Borrowed(cx)
        } else {
            std::borrow::Cow::Owned(cx.at(serde_json::json!({
                "sequence": self.name,
                "step": i,
            })))
        }
    }
}

impl Workflow for Sequence {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let key = resume::key("sequence", &self.name);
            let session = resume::restored(session);
            let mut s = session;
            let mut start = resume::marker(&s, &key)
                .and_then(Value::as_u64)
                .map(|i| i as usize);
            // Cut off by a crash inside a loop or a fan-out: the step its position names.
            if start.is_none()
                && let Some(f) = resume::found(&s, cx, |e| e["sequence"] == self.name.as_str())
            {
                let i = f.entry["step"].as_u64().unwrap_or(0) as usize;
                let step = self.steps.get(i).ok_or_else(|| {
                    FlowError::Config(format!("sequence {} has no step {i}", self.name))
                })?;
                if f.deeper || f.cut {
                    s = self.step_cx(cx, i).forward(step.as_ref(), s).await?;
                    if !s.pending().is_empty() {
                        return Ok(resume::stopped(s, key, i as u64));
                    }
                }
                start = Some(i + 1);
            }
            let start = start
                .or_else(|| resume::cut_in(&s, &self.steps))
                .unwrap_or(0);
            for (i, step) in self.steps.iter().enumerate().skip(start) {
                s = self.step_cx(cx, i).forward(step.as_ref(), s).await?;
                if !s.pending().is_empty() {
                    return Ok(resume::stopped(s, key, i as u64));
                }
            }
            Ok(s)
        })
    }
    fn role(&self) -> WorkflowRole {
        WorkflowRole::Group
    }
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        for w in &self.steps {
            visit(w.as_ref());
        }
    }
}

/// A fan-out: every branch runs on its own fork of the input, concurrently; the outputs are
/// merged in declared order (whatever order they finish in), so runs are reproducible.
///
/// If the input is placed but its sandbox is not open yet, it is opened once before the
/// fan-out: all branches then share one live sandbox (which the merge rule needs anyway),
/// and its handle id does not depend on which branch reaches it first. In deterministic
/// mode each branch gets its own stamper derived from the input's, so ids and tokens do not
/// depend on scheduling either.
///
/// The result keeps the input's chunks once, then each branch's new chunks tagged with the
/// branch session id (`branch` field); its usage is the input's plus every branch's.
#[derive(Clone)]
pub struct Parallel {
    name: String,
    description: String,
    branches: Vec<SharedWorkflow>,
}

impl fmt::Debug for Parallel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parallel")
            .field("name", &self.name)
            .field(
                "branches",
                &self
                    .branches
                    .iter()
                    .map(|s| s.name().to_owned())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Parallel {
    /// An empty fan-out named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            branches: Vec::new(),
        }
    }

    /// Sets the description.
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Adds a branch.
    pub fn branch(mut self, branch: impl Workflow + 'static) -> Self {
        self.branches.push(Arc::new(branch));
        self
    }

    /// Adds a shared branch.
    pub fn branch_shared(mut self, branch: SharedWorkflow) -> Self {
        self.branches.push(branch);
        self
    }
}

/// A session's usage and per-agent attribution.
type UsageOf = (Option<Usage>, BTreeMap<String, Usage>);

impl Parallel {
    /// The branch outputs as one session: [`Session::merge_all`] (lineage, strict placement
    /// rule, shared prefix once, suffixes tagged with each branch's tag), plus the input's
    /// usage; when a branch stopped on pending work, the resume marker too.
    fn merge(
        &self,
        base: &UsageOf,
        input: &Session,
        branches: &[Branch],
    ) -> Result<Session, FlowError> {
        let outs: Vec<Session> = branches.iter().map(|b| b.out.clone()).collect();
        let merged = Session::merge_all(&outs).map_err(|e| {
            let at = FailedAt::new(Some(&self.name), "merge");
            fail_from(e.into(), input, "Parallel.merge", at)
        })?;
        let renames: Vec<(String, String)> = branches
            .iter()
            .filter(|b| b.tag != b.out.id().as_str())
            .map(|b| (b.out.id().to_string(), b.tag.clone()))
            .collect();
        let mut merged = resume::retagged(merged, &renames);
        let mut per_agent = base.1.clone();
        for (a, u) in merged.agent_usage() {
            *per_agent.entry(a.clone()).or_default() += *u;
        }
        let usage = rath_session::sum_optional(base.0, merged.usage());
        merged = merged
            .with_usage_totals(usage, per_agent)
            .with_extra("parallel.name", self.name.clone())
            .with_extra("parallel.branches", outs.len() as u64);
        if merged.pending().is_empty() {
            return Ok(merged);
        }
        let prefix = match outs.split_first() {
            Some((first, rest)) if !rest.is_empty() => rest
                .iter()
                .map(|o| first.chunks().shared_prefix_len(o.chunks()))
                .min()
                .unwrap_or(0),
            _ => outs.first().map_or(0, Session::len),
        };
        let marker = resume::parallel_marker(base, branches, prefix, merged.len());
        Ok(resume::stopped(
            merged,
            resume::key("parallel", &self.name),
            marker,
        ))
    }

    /// Opens the input's sandbox once, forks, runs every branch, merges.
    async fn fan_out(&self, session: Session, cx: &FlowContext) -> Result<Session, FlowError> {
        let placement = session.placement();
        if placement.backend().is_some()
            && placement.handle().is_none()
            && let Err(e) = cx.backends().sandbox_for(&session).await
        {
            let at = FailedAt::new(Some(&self.name), "fan_out");
            return Err(fail_from(e.into(), &session, "Parallel.fan_out", at));
        }
        let parent = session.stamper().clone();
        // Every fork is recorded, in declared order, before a branch runs; each branch
        // records into its own journal, joined back in declared order.
        let entry = self.entry(&session);
        let forks: Vec<(FlowContext, Session)> = self
            .branches
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let fork = session.fork().with_stamper(branch_stamper(&parent));
                (cx.branch(&fork).at(at_branch(&entry, i)), fork)
            })
            .collect();
        let runs = self
            .branches
            .iter()
            .zip(&forks)
            .map(|(b, (bcx, fork))| bcx.forward(b.as_ref(), fork.clone()));
        // Every branch runs to its end (a failing one does not cut its siblings off
        // mid-call); the first failure in declared order is the result.
        let results = futures::future::join_all(runs).await;
        cx.join(&forks.into_iter().map(|(bcx, _)| bcx).collect::<Vec<_>>());
        let mut outs: Vec<Branch> = Vec::with_capacity(self.branches.len());
        for r in results {
            let out = r?;
            outs.push(Branch {
                tag: out.id().to_string(),
                stamper: out.stamper().state(),
                out: out.with_stamper(parent.clone()),
            });
        }
        let base = (session.usage(), session.agent_usage().clone());
        self.merge(&base, &session, &outs)
    }

    /// Resumes a fan-out that stopped: rebuilds every branch from the marker, forwards the
    /// stopped ones (finished ones are kept as they were) with the stamper each stopped
    /// with, merges again under the branches' first tags.
    async fn resume(
        &self,
        stopped: Session,
        marker: Value,
        cx: &FlowContext,
    ) -> Result<Session, FlowError> {
        let at = || FailedAt::new(Some(&self.name), "resume");
        let fan = resume::branches_from(&stopped, &marker)
            .map_err(|e| fail_from(e, &stopped, "Parallel.resume", at()))?;
        if fan.branches.len() != self.branches.len() {
            let e = FlowError::Config(format!(
                "parallel {} stopped with {} branches but has {}",
                self.name,
                fan.branches.len(),
                self.branches.len()
            ));
            return Err(fail_from(e, &stopped, "Parallel.resume", at()));
        }
        let parent = stopped.stamper().clone();
        // Only the stopped branches run again; each records into its own journal.
        let contexts: Vec<Option<FlowContext>> = fan
            .branches
            .iter()
            .map(|(b, stopped_here)| stopped_here.then(|| cx.branch(&b.out)))
            .collect();
        let runs = self.branches.iter().zip(fan.branches).zip(&contexts).map(
            |((b, (branch, stopped_here)), bcx)| {
                let parent = &parent;
                async move {
                    let Some(bcx) = bcx.as_ref().filter(|_| stopped_here) else {
                        return Ok(branch);
                    };
                    let stamper = branch.stamper.as_ref().and_then(Stamper::restore);
                    let stamper = stamper.unwrap_or_else(|| branch_stamper(parent));
                    let out = bcx
                        .forward(b.as_ref(), branch.out.with_stamper(stamper))
                        .await?;
                    Ok::<_, FlowError>(Branch {
                        stamper: out.stamper().state(),
                        out: out.with_stamper(parent.clone()),
                        tag: branch.tag,
                    })
                }
            },
        );
        let results = futures::future::join_all(runs).await;
        cx.join(&contexts.into_iter().flatten().collect::<Vec<_>>());
        let mut outs: Vec<Branch> = Vec::with_capacity(self.branches.len());
        for r in results {
            outs.push(r?);
        }
        self.merge(&fan.input_usage, &stopped, &outs)
    }
}

/// `entry` (a fan-out's position entry) for branch `i`.
fn at_branch(entry: &Value, i: usize) -> Value {
    let mut e = entry.clone();
    e["branch"] = serde_json::json!(i);
    e
}

impl Parallel {
    /// The position entry of a fan-out of `input` (its `branch` set per branch): the input
    /// it forked, its length (the prefix every branch starts with) and usage.
    fn entry(&self, input: &Session) -> Value {
        serde_json::json!({
            "parallel": self.name,
            "branch": 0,
            "input": input.id().as_str(),
            "prefix": input.len(),
            "input_usage": input.usage(),
            "input_agent_usage": input.agent_usage(),
        })
    }

    /// Resumes a fan-out a crash cut off, from `cut`, a session one of its branches made
    /// (`found`: where). The other branches come from the store the context's sink wrote
    /// them to, each as far as it got: a branch that finished is kept as it is, one cut off
    /// resumes there, one that left nothing runs from a fork of the input (rebuilt from
    /// `cut`'s prefix and the position's usage); then the outputs merge as a fan-out's do.
    async fn recover(
        &self,
        cut: Session,
        found: resume::Found,
        cx: &FlowContext,
    ) -> Result<Session, FlowError> {
        let entry = found.entry;
        let (input, stored) = self.recovery_sources(&cut, &entry, cx).map_err(|e| {
            let at = FailedAt::new(Some(&self.name), "recover");
            fail_from(e, &cut, "Parallel.recover", at)
        })?;
        let parent = cut.stamper().clone();
        let cut_branch = entry["branch"].as_u64().map(|b| b as usize);
        let runs = self.branches.iter().enumerate().map(|(i, b)| {
            let mut want = cx.position().to_vec();
            want.push(at_branch(&entry, i));
            let mine = (Some(i) == cut_branch).then_some(&cut);
            let pick = pick_branch(&want, &stored, mine);
            recover_branch(b, want, pick, &input, &parent, cx)
        });
        let results = futures::future::join_all(runs).await;
        let mut outs: Vec<Branch> = Vec::with_capacity(self.branches.len());
        let mut contexts = Vec::new();
        for r in results {
            let (out, bcx) = r?;
            contexts.extend(bcx);
            outs.push(Branch {
                tag: out.id().to_string(),
                stamper: out.stamper().state(),
                out: out.with_stamper(parent.clone()),
            });
        }
        cx.join(&contexts);
        let base = (input.usage(), input.agent_usage().clone());
        self.merge(&base, &input, &outs)
    }

    /// What a fan-out cut off resumes from: its input (rebuilt from `cut` and `entry`) and
    /// the sessions of the context's sink's store that hold a position.
    fn recovery_sources(
        &self,
        cut: &Session,
        entry: &Value,
        cx: &FlowContext,
    ) -> Result<(Session, Vec<rath_persist::LoadedSession>), FlowError> {
        let input = recovered_input(cut, entry)?;
        match cx.sink().map(|sink| sink.stored(resume::POSITION_KEY)) {
            Some(Ok(stored)) => Ok((input, stored)),
            why => {
                let why = match why {
                    Some(Err(e)) => e.to_string(),
                    _ => "no session sink in the context".to_owned(),
                };
                Err(FlowError::Config(format!(
                    "parallel {}: a branch cut off by a crash resumes with its sibling branches, \
                     which only the store they were written to holds: forward the session \
                     through the workflow's persist_to (or with_sink) layer ({why})",
                    self.name
                )))
            }
        }
    }
}

/// One branch of a fan-out resuming after a crash: `pick` (what it left, and whether that
/// was cut off), else a fork of `input`; forwarded through `branch` at position `want` (its
/// last entry this branch's), unless it is the branch's own finished output. The output,
/// and the branch's context when one ran.
async fn recover_branch(
    branch: &SharedWorkflow,
    want: Vec<Value>,
    pick: Option<(Session, bool)>,
    input: &Session,
    parent: &Stamper,
    cx: &FlowContext,
) -> Result<(Session, Option<FlowContext>), FlowError> {
    let entry = want.last().cloned().unwrap_or(Value::Null);
    // A branch's chunks begin with the input's: shared again, so the merge keeps them
    // once, as a fan-out's merge does.
    let pick = match pick {
        Some((s, cut)) => Some((on_input(resume::with_evidence_usage(s), input)?, cut)),
        None => None,
    };
    let (bcx, start) = match pick {
        // Finished, and made by the branch itself: its output.
        Some((s, false)) if resume::position_of(&s).len() == want.len() => {
            cx.record(&s);
            return Ok((s, None));
        }
        Some((s, cut)) => (cx.branch(&s).at(entry).recovering(s.id(), cut), s),
        None => {
            let fork = input.fork();
            (cx.branch(&fork).at(entry), fork)
        }
    };
    let out = bcx
        .forward(branch.as_ref(), start.with_stamper(branch_stamper(parent)))
        .await?;
    Ok((out, Some(bcx)))
}

/// The input of a fan-out a crash cut off, rebuilt from a branch's session `cut` (the
/// input's chunks are its first `prefix`) and the fan-out's position `entry` (the input's
/// id and usage).
fn recovered_input(cut: &Session, entry: &Value) -> Result<Session, FlowError> {
    let bad = |what: &str| FlowError::Config(format!("the fan-out position is malformed: {what}"));
    let id = entry["input"].as_str().ok_or_else(|| bad("input"))?;
    let prefix = entry["prefix"]
        .as_u64()
        .map(|p| p as usize)
        .filter(|p| *p <= cut.len())
        .ok_or_else(|| bad("prefix"))?;
    let usage = serde_json::from_value(entry["input_usage"].clone()).map_err(|_| bad("usage"))?;
    let agent_usage = serde_json::from_value(entry["input_agent_usage"].clone())
        .map_err(|_| bad("agent usage"))?;
    let parts = rath_session::SessionParts {
        id: rath_session::SessionId::new(id),
        created_at: cut.created_at(),
        lineage: rath_session::Lineage::new(
            Vec::new(),
            "Parallel.recover",
            rath_session::LineageKind::OpAnnotate,
        ),
        chunks: cut.chunks().range(..prefix),
        usage,
        agent_usage,
        placement: cut.placement().clone(),
        pending: Vec::new(),
    };
    Ok(Session::from_parts(parts, cut.stamper().clone()))
}

/// `s` (a branch's session) with its first chunks, the fan-out input's, shared with
/// `input` (the same chunks, by value, are required).
fn on_input(s: Session, input: &Session) -> Result<Session, FlowError> {
    let n = input.len();
    let same = s.len() >= n
        && input
            .chunks()
            .iter()
            .zip(s.chunks().iter())
            .all(|(a, b)| a == b);
    if !same {
        return Err(FlowError::Config(format!(
            "session {} does not start with the chunks of the fan-out's input {}",
            s.id(),
            input.id()
        )));
    }
    let mut chunks = input.chunks().clone();
    chunks.append(s.chunks().range(n..));
    Ok(s.with_chunks(chunks))
}

/// What branch `want` (a position: the fan-out's and this branch's entry last) left, from
/// the sessions of the store (and `cut`, the session the resume started from, when it is
/// this branch's): a session cut off (the given one first), else the last finished one no
/// other of the branch's continues; `None` when the branch left nothing. The flag says
/// whether it was cut off.
fn pick_branch(
    want: &[Value],
    stored: &[rath_persist::LoadedSession],
    cut: Option<&Session>,
) -> Option<(Session, bool)> {
    let mut mine: Vec<(Session, bool)> = Vec::new();
    if let Some(c) = cut {
        mine.push((c.clone(), true));
    }
    for l in stored {
        let s = &l.session;
        let at = resume::position_of(s);
        if at.len() >= want.len()
            && at[..want.len()] == *want
            && !mine.iter().any(|(m, _)| m.id() == s.id())
        {
            // Finished: closed, and ending in the model's answer (a store that closes every
            // write, SQL, holds a loop cut before its first reply as closed too).
            let answered = s.conversation().last().is_some_and(|c| {
                matches!(c.body(), ChunkBody::Assistant(_)) && c.tool_calls().is_empty()
            });
            let cut = !l.closed || !answered || !s.unanswered_tool_calls().is_empty();
            mine.push((s.clone(), cut));
        }
    }
    if let Some(c) = mine.iter().find(|(_, cut)| *cut) {
        return Some(c.clone());
    }
    let parents: std::collections::HashSet<&rath_session::SessionId> = mine
        .iter()
        .flat_map(|(s, _)| s.lineage().parents.iter())
        .collect();
    mine.iter()
        .filter(|(s, _)| !parents.contains(s.id()))
        .max_by_key(|(s, _)| s.created_at())
        .cloned()
}

impl Workflow for Parallel {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            if self.branches.is_empty() {
                return Ok(session);
            }
            let session = resume::restored(session);
            if let Some(marker) =
                resume::marker(&session, &resume::key("parallel", &self.name)).cloned()
            {
                return self.resume(session, marker, cx).await;
            }
            match resume::found(&session, cx, |e| e["parallel"] == self.name.as_str()) {
                Some(f) => self.recover(session, f, cx).await,
                None => self.fan_out(session, cx).await,
            }
        })
    }
    fn role(&self) -> WorkflowRole {
        WorkflowRole::Group
    }
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        for w in &self.branches {
            visit(w.as_ref());
        }
    }
}

/// The predicate of a [`LoopUntil`].
pub type SessionPredicate = dyn Fn(&Session) -> bool + Send + Sync;

/// Runs `body` repeatedly, each time on the previous output, until the predicate holds (it
/// is checked after every iteration) or `max_iterations` ran. Stops on pending work too.
pub struct LoopUntil {
    name: String,
    description: String,
    body: SharedWorkflow,
    until: Box<SessionPredicate>,
    max_iterations: usize,
}

impl fmt::Debug for LoopUntil {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoopUntil")
            .field("name", &self.name)
            .field("body", &self.body.name())
            .field("max_iterations", &self.max_iterations)
            .finish()
    }
}

impl LoopUntil {
    /// Runs `body` at most `max_iterations` times (no predicate: always all of them).
    pub fn new(
        name: impl Into<String>,
        body: impl Workflow + 'static,
        max_iterations: usize,
    ) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            body: Arc::new(body),
            until: Box::new(|_| false),
            max_iterations,
        }
    }

    /// Stops once `predicate` holds for an iteration's output.
    pub fn until(mut self, predicate: impl Fn(&Session) -> bool + Send + Sync + 'static) -> Self {
        self.until = Box::new(predicate);
        self
    }

    /// Sets the description.
    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The context iteration `i` runs in: one level deeper, at this iteration.
    fn at(&self, cx: &FlowContext, i: usize) -> FlowContext {
        cx.at(serde_json::json!({"loop": self.name, "iteration": i}))
    }
}

impl Workflow for LoopUntil {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn forward<'a>(
        &'a self,
        session: Session,
        cx: &'a FlowContext,
    ) -> BoxFuture<'a, Result<Session, FlowError>> {
        Box::pin(async move {
            let key = resume::key("loop", &self.name);
            let session = resume::restored(session);
            let mut s = session;
            let marker = resume::marker(&s, &key).and_then(Value::as_u64);
            let mut start = marker.unwrap_or(0) as usize;
            // Cut off by a crash: the iteration its position names, then the rest.
            if marker.is_none()
                && let Some(f) = resume::found(&s, cx, |e| e["loop"] == self.name.as_str())
            {
                let i = f.entry["iteration"].as_u64().unwrap_or(0) as usize;
                if f.deeper || f.cut {
                    s = self.at(cx, i).forward(self.body.as_ref(), s).await?;
                    if !s.pending().is_empty() {
                        return Ok(resume::stopped(s, key, i as u64));
                    }
                }
                if (self.until)(&s) {
                    return Ok(s);
                }
                start = i + 1;
            }
            for i in start..self.max_iterations {
                s = self.at(cx, i).forward(self.body.as_ref(), s).await?;
                if !s.pending().is_empty() {
                    return Ok(resume::stopped(s, key, i as u64));
                }
                if (self.until)(&s) {
                    break;
                }
            }
            Ok(s)
        })
    }
    fn role(&self) -> WorkflowRole {
        WorkflowRole::Group
    }
    fn children(&self, visit: &mut dyn FnMut(&dyn Workflow)) {
        visit(self.body.as_ref());
    }
}
