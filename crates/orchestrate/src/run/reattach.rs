//! Re-attaching to an agent whose control channel was lost (its ssh
//! session died: the master killed, the connection reset by a firewall
//! that forgot it), so that a run outlives the loss of its ssh session.
//!
//! An agent started with `--reattach SECS` (every remote agent of a
//! launcher that can re-attach: ssh) says where it can be reached
//! (`DETACHABLE PATH`) and gets a secret (`ATTACHKEY`). When its channel ends
//! without `END` while the run goes on, rdpipe does not judge it yet: it
//! asks the launcher for a new channel to the host ([`Launcher::reattach`]:
//! a new ssh master if the old one is gone, with backoff) running
//! `rdrecv --agent-attach PATH`, presents the secret and its count of the
//! agent's lines (`ATTACH KEY N`), and hears the agent's count of rdpipe's
//! (`ATTACHED M`). Each side then sends again what the other missed (the
//! agent its lines from the N-th on, rdpipe its own from the M-th on), and
//! the run goes on. Until `--reconnect-timeout` has passed; then the agent
//! is judged as before (it died), and it ends itself on its host.
//!
//! A channel rdpipe closes on purpose gets `BYE` first ([`Runner::dismiss`]):
//! that agent ends at once. Data hops are not involved: they reconnect on
//! their own (`rdpipe_transport::reconnect`).
//!
//! [`Launcher::reattach`]: rdpipe_launch::Launcher::reattach

use super::verdict::Cause;
use super::{Event, Runner};
use rdpipe_control::{FromAgent, ToAgent, STALLED_AFTER};
use rdpipe_launch::command_line::remote_command_line;
use rdpipe_launch::install::default_bin;
use rdpipe_launch::{AgentHandle, Launcher};
use rdpipe_plan::Node;
use rdpipe_plan::{Host, RemoteHost};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tracing::{debug, info, warn};

/// How long a new channel has to answer `ATTACH`.
const ANSWER: Duration = Duration::from_secs(15);

/// Re-attach bookkeeping for one agent.
#[derive(Default)]
pub(super) struct AttachState {
    /// `DETACHABLE`: the agent's socket.
    pub path: Option<String>,
    /// The secret sent as `ATTACHKEY`.
    pub secret: Option<Vec<u8>>,
    /// Whether [`AttachState::sent`] records (from the line after the key
    /// line on).
    pub logging: bool,
    /// rdpipe's lines to the agent after the key line, less `PING`.
    pub lines: Vec<String>,
    /// Complete lines heard from the agent (all channels).
    pub received: u64,
    /// A re-attach in progress.
    pub pending: Option<Pending>,
    /// The current channel's number: the events of a channel replaced by a
    /// re-attach are ignored.
    pub gen: u32,
    /// When the current channel last carried a line or a `PONG`.
    pub heard: Option<Instant>,
}

impl AttachState {
    /// Whether an event of channel `g` is about the current channel (which
    /// was then heard from).
    pub fn current(&mut self, g: u32) -> bool {
        if g == self.gen {
            self.heard = Some(Instant::now());
        }
        g == self.gen
    }

    /// Records `line`, sent to the agent (or to be sent after a re-attach).
    pub fn sent(&mut self, line: &str) {
        if self.logging && self.secret.is_some() && line != "PING" {
            self.lines.push(line.to_string());
        }
    }
}

/// A re-attach under way.
pub(super) struct Pending {
    since: Instant,
    task: tokio::task::JoinHandle<()>,
    /// How the lost channel ended (status, words): what is judged if the
    /// re-attach fails.
    code: Option<i32>,
    text: String,
}

/// A new channel to a detached agent, past `ATTACHED`.
pub struct NewChannel {
    handle: AgentHandle,
    /// How many of rdpipe's lines the agent has.
    agent_has: u64,
}

/// Why a re-attach did not happen.
enum Failed {
    /// No agent answers at its socket: it ended (or was killed).
    Gone,
    /// The host could not be reached, or the channel not opened, in time.
    Unreachable(String),
}

impl Runner {
    /// Agent `i` says it can be re-attached at `path`. Should rdpipe die
    /// (SIGKILL), the launcher attaches to it once more to say `BYE`, so that
    /// it ends at once rather than wait to be re-attached.
    pub(super) fn detachable(&mut self, i: usize, path: String) {
        debug!("[{}] re-attachable at {path}", i + 1);
        let line = self.attach_line(i, &path);
        self.agents[i].attach.path = Some(path);
        if let Some(secret) = self.agents[i].attach.secret.clone() {
            // (A count beyond the agent's lines: it ends at once, sending
            // nothing again.)
            let bye = ToAgent::Attach {
                secret,
                received: u64::MAX,
            };
            let input = format!("{bye}\n{}\n", ToAgent::Bye);
            let host = &self.plan.segments[i].host;
            self.launchers.of(host).farewell(i, line, input);
        }
    }

    /// The remote command line that attaches a new channel to agent `i`
    /// (socket `path`).
    fn attach_line(&self, i: usize, path: &str) -> String {
        let bin = self
            .agent_bins
            .get(&i)
            .cloned()
            .unwrap_or_else(|| default_bin(self.config.remote_bin.as_deref()));
        remote_command_line(&bin, &["--agent-attach".into(), path.to_string()], &[])
    }

    /// Closes agent `i`'s channel on purpose: `BYE` first where the agent
    /// would otherwise wait to be re-attached.
    pub(super) fn dismiss(&mut self, i: usize) {
        let a = &mut self.agents[i];
        let Some(mut w) = a.stdin.take() else {
            return;
        };
        if a.attach.path.is_some() {
            tokio::spawn(async move {
                let line = format!("{}\n", ToAgent::Bye);
                let _ = w.write_all(line.as_bytes()).await;
                let _ = w.flush().await;
            });
        }
    }

    /// Whether agent `i`'s channel, which just ended, is to be re-attached:
    /// it can be, it has not ended its segment, and the run goes on.
    pub(super) fn should_reattach(&self, i: usize) -> bool {
        let a = &self.agents[i];
        a.attach.path.is_some()
            && a.attach.secret.is_some()
            && a.attach.pending.is_none()
            && a.stdin.is_some()
            && self.segs[i].ended.is_none()
            && !self.segs[i].exited
            && !self.closing
            && self.signal.is_none()
            && self.config.reconnect_timeout > 0
            && matches!(self.plan.segments[i].host, Host::Remote(_))
    }

    /// Re-attaches to the agents whose channel carried nothing (not even a
    /// `PONG`) for [`STALLED_AFTER`]: a connection that stalled without
    /// breaking, which ssh's keepalive would end only much later. The new
    /// channel goes through a new ssh connection.
    pub(super) fn find_stalled(&mut self) {
        for i in 0..self.agents.len() {
            let a = &self.agents[i].attach;
            let silent = a.heard.is_some_and(|t| t.elapsed() > STALLED_AFTER);
            if silent && self.should_reattach(i) {
                let text = format!("nothing on it for {} s", STALLED_AFTER.as_secs());
                self.start_reattach(i, None, text, Some(Instant::now()));
            }
        }
    }

    /// Starts re-attaching to agent `i`, whose channel ended as `text` says
    /// (through a connection made after `stale`, when given).
    pub(super) fn start_reattach(
        &mut self,
        i: usize,
        code: Option<i32>,
        text: String,
        stale: Option<Instant>,
    ) {
        let Host::Remote(host) = self.plan.segments[i].host.clone() else {
            return;
        };
        let a = &mut self.agents[i];
        let (Some(path), Some(secret)) = (a.attach.path.clone(), a.attach.secret.clone()) else {
            return;
        };
        a.stdin = None;
        // The old channel's events are ignored from now on.
        a.attach.gen += 1;
        let received = a.attach.received;
        let line = self.attach_line(i, &path);
        let launcher = self.launchers.of(&self.plan.segments[i].host).clone();
        // A channel that stalled may belong to a network outage the data
        // hops ride out (their dead-peer time, then their reconnect): the
        // agent is given as long, as it was before stalls were noticed.
        let mut limit = Duration::from_secs(self.config.reconnect_timeout);
        if stale.is_some() {
            limit += Duration::from_secs(rdpipe_transport::connect::DEAD_PEER_SECS);
        }
        info!(
            "{}: the control channel was lost ({text}); re-attaching (up to {} s)",
            self.seg_desc(i),
            limit.as_secs()
        );
        if let Some(t) = &self.progress {
            t.set_note(Some(&format!("reconnecting to {}…", host.spec)));
        }
        let tx = self.events.tx.clone();
        let task = tokio::spawn(async move {
            let deadline = Instant::now() + limit;
            let r = reconnect(launcher, i, &host, line, &secret, received, deadline, stale).await;
            let r = r.map_err(|f| match f {
                Failed::Gone => String::new(),
                Failed::Unreachable(m) => m,
            });
            let _ = tx.send(Event::Reattached(i, r));
        });
        self.agents[i].attach.pending = Some(Pending {
            since: Instant::now(),
            task,
            code,
            text,
        });
    }

    /// The re-attach to agent `i` ended: the run goes on with the new
    /// channel, or the agent is judged as its lost channel left it.
    pub(super) async fn reattached(&mut self, i: usize, r: Result<NewChannel, String>) {
        let Some(p) = self.agents[i].attach.pending.take() else {
            return;
        };
        if let Some(t) = &self.progress {
            t.set_note(None);
        }
        let plain = !self.plan.is_sink(i) && self.plan.source_of(i).is_none();
        let ch = match r {
            Ok(ch) => ch,
            // The host could not be reached: said so, as a root cause (a
            // sink's or a source's is judged with the others).
            Err(why)
                if !why.is_empty()
                    && plain
                    && self.signal.is_none()
                    && !self.closing
                    && self.segs[i].ended.is_none() =>
            {
                self.segs[i].exited = true;
                for l in self.plan.lanes_of(i) {
                    self.segs[l].exited = true;
                }
                let cause = Cause::Unreachable {
                    seg: self.seg_desc(i),
                    host: self.plan.segments[i].host.label().to_string(),
                    lost: p.text,
                    why,
                };
                self.fail(Some(Node::Segment(i)), cause);
                return;
            }
            Err(why) => {
                let text = match why.is_empty() {
                    true => p.text,
                    false => format!("{}; not re-attached: {why}", p.text),
                };
                self.channel_ended(i, p.code, text).await;
                return;
            }
        };
        let AgentHandle {
            stdin,
            stdout,
            stderr,
            wait,
            ..
        } = ch.handle;
        self.agents[i].stdin = Some(stdin);
        if self.closing || self.signal.is_some() {
            // Too late: the agent is told to end.
            self.dismiss(i);
            self.watch_channel(i, stdout, stderr, wait);
            return;
        }
        let secs = p.since.elapsed().as_secs_f64();
        info!("{}: re-attached after {secs:.3} s", self.seg_desc(i));
        self.reattaches.push(rdpipe_report::ReattachReport {
            host: self.plan.segments[i].host.label().to_string(),
            segment: i + 1,
            downtime_seconds: secs,
            lost: p.text,
        });
        let lines = &self.agents[i].attach.lines;
        let from = usize::try_from(ch.agent_has).unwrap_or(usize::MAX);
        if from > lines.len() {
            warn!(
                "[{}] the agent has {from} of rdpipe's lines, rdpipe sent {}",
                i + 1,
                lines.len()
            );
        }
        let again: Vec<String> = lines.iter().skip(from).cloned().collect();
        // Reading first: the agent sends its own backlog meanwhile.
        self.watch_channel(i, stdout, stderr, wait);
        debug!("[{}] sending {} line(s) again", i + 1, again.len());
        for l in again {
            self.write_line(i, &l).await;
        }
    }

    /// Teardown: a re-attach still under way is given up (the agent ends on
    /// its host when its wait runs out); the agent counts as gone.
    pub(super) fn give_up_reattach(&mut self, i: usize) {
        if let Some(p) = self.agents[i].attach.pending.take() {
            debug!("[{}] teardown: giving up the re-attach", i + 1);
            p.task.abort();
            self.segs[i].exited = true;
            for l in self.plan.lanes_of(i) {
                self.segs[l].exited = true;
            }
        }
    }
}

/// Opens a new channel to the agent at `line`'s socket and attaches it,
/// retrying until `deadline` (through a connection made after `stale`,
/// when given).
#[allow(clippy::too_many_arguments)]
async fn reconnect(
    launcher: Arc<dyn Launcher>,
    seg: usize,
    host: &RemoteHost,
    line: String,
    secret: &[u8],
    received: u64,
    deadline: Instant,
    stale: Option<Instant>,
) -> Result<NewChannel, Failed> {
    let mut pause = Duration::from_millis(100);
    loop {
        let opened = launcher.reattach(seg, host, line.clone(), deadline, stale);
        let h = match tokio::time::timeout_at(deadline.into(), opened).await {
            Ok(h) => h.map_err(|e| Failed::Unreachable(e.cause.to_string()))?,
            Err(_) => return Err(Failed::Unreachable("no new ssh session in time".into())),
        };
        match handshake(h, secret, received).await {
            Ok(ch) => return Ok(ch),
            Err(Failed::Gone) => return Err(Failed::Gone),
            Err(Failed::Unreachable(m)) => {
                debug!("[{}] re-attach: {m}", seg + 1);
                if Instant::now() + pause >= deadline {
                    return Err(Failed::Unreachable(m));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// `ATTACH KEY N` on a new channel, and the agent's `ATTACHED M`.
async fn handshake(h: AgentHandle, secret: &[u8], received: u64) -> Result<NewChannel, Failed> {
    let AgentHandle {
        mut stdin,
        stdout,
        stderr,
        pid,
        wait,
    } = h;
    let attach = ToAgent::Attach {
        secret: secret.to_vec(),
        received,
    };
    let _ = stdin.write_all(format!("{attach}\n").as_bytes()).await;
    let _ = stdin.flush().await;
    let mut r = BufReader::new(stdout);
    let mut first = String::new();
    let answered = tokio::time::timeout(ANSWER, r.read_line(&mut first)).await;
    if let Ok(Ok(1..)) = answered {
        if let Ok(FromAgent::Attached(agent_has)) = first.trim_end().parse() {
            return Ok(NewChannel {
                handle: AgentHandle {
                    stdin,
                    stdout: Box::new(r),
                    stderr,
                    pid,
                    wait,
                },
                agent_has,
            });
        }
    }
    // No answer: the helper's words and status say why.
    drop(stdin);
    let mut words = String::new();
    if let Some(mut e) = stderr {
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), e.read_to_end(&mut buf)).await;
        words = String::from_utf8_lossy(&buf).trim().to_string();
    }
    let (code, how) = tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .unwrap_or((None, "did not end".into()));
    if code == Some(i32::from(rdpipe_agent::attach::NO_AGENT)) {
        debug!("re-attach: {words}");
        return Err(Failed::Gone);
    }
    let line = words.lines().last().unwrap_or_default();
    Err(Failed::Unreachable(match line.is_empty() {
        true => format!("the re-attach session {how}"),
        false => rdpipe_control::one_line(line),
    }))
}
