//! Starting the agents: the hosts prepared through the run's launchers
//! ([`super::launchers`]), then one agent per segment, all at once (each
//! launcher bounds how many of its own start together). The agent's key (and
//! `PROGRESS`) go down its stdin, sealed where its launcher's channel needs
//! it; its stdout lines and exit come back as events; its stderr is forwarded
//! line by line, prefixed with the host.

use super::agent_args::{agent_settings, chain_hops};
use super::install::{start_agent, StartFailure};
use super::verdict::Cause;
use super::{Event, Runner};
use rdpipe_control::{Direction, KeyLine, ToAgent};
use rdpipe_launch::command_line::tuning_env;
use rdpipe_launch::{AgentHandle, AgentStart, LaunchError, Spawned};
use rdpipe_plan::{Host, Node};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tracing::debug;

/// A forwarded stderr line, `host: line`, written whole with its control
/// characters escaped (the progress line, if any, is cleared and drawn
/// again).
fn stderr_line(prefix: &str, line: &[u8]) {
    rdpipe_term::forwarded(prefix, line);
}

impl Runner {
    /// Records a launcher's failure against its segment (or the run).
    fn launch_failed(&mut self, e: LaunchError) {
        let node = e.seg.map(Node::Segment);
        self.fail(node, Cause::Launch(e));
    }

    /// Readies every remote host through its launcher; false when one could
    /// not be (reported).
    pub(super) async fn prepare_hosts(&mut self) -> bool {
        let hosts = self.plan.remote_hosts();
        let launcher = self.launchers.remote().clone();
        match launcher.prepare(&hosts).await {
            Ok(()) => true,
            Err(errors) => {
                // A host that holds only `--from` sources' segments costs
                // those sources ([`super::sources`]), not the run.
                let mut fatal = false;
                for e in errors {
                    let segs = e
                        .host
                        .as_ref()
                        .and_then(|h| hosts.iter().find(|(r, _)| &r.spec == h))
                        .map(|(_, s)| s.clone())
                        .unwrap_or_default();
                    if self.only_sources(&segs) {
                        self.sources_not_started(&segs, Cause::Launch(e));
                    } else {
                        fatal = true;
                        self.launch_failed(e);
                    }
                }
                !fatal
            }
        }
    }

    /// Starts one agent per segment and the tasks that read its output.
    pub(super) async fn spawn_agents(&mut self) {
        let tuning = tuning_env();
        let n = self.plan.segments.len();
        let mut args_of = Vec::with_capacity(n);
        // Every agent starts at once (each is a round trip to its host; one
        // after another they add up with many hosts).
        let mut starting = tokio::task::JoinSet::new();
        let via = self.launchers.remote().address_origin();
        for i in 0..n {
            if self.plan.merge_of_lane(i).is_some() || self.segs[i].not_started {
                // Run by its merge segment's agent, or its source's host
                // could not be readied.
                args_of.push(None);
                continue;
            }
            let host = self.plan.segments[i].host.clone();
            let launcher = self.launchers.of(&host).clone();
            let mut settings = agent_settings(&self.plan, i, &self.config, via);
            if launcher.reattachable() && matches!(host, Host::Remote(_)) {
                settings.reattach = self.config.reconnect_timeout;
            }
            let (program, checked) = self.program_of(&host);
            let start = AgentStart {
                seg: i,
                host: host.clone(),
                program,
                settings: settings.clone(),
                env: tuning.clone(),
                pipe_stderr: self.progress.is_some(),
            };
            args_of.push(Some((launcher.kind(), settings.to_argv())));
            starting.spawn(async move { (i, start_agent(launcher, start, checked).await) });
        }
        let mut started: Vec<Option<Result<Spawned, StartFailure>>> =
            (0..n).map(|_| None).collect();
        while let Some(r) = starting.join_next().await {
            match r {
                Ok((i, s)) => started[i] = Some(s),
                Err(e) => self.fail(None, Cause::Local(format!("agent start task failed: {e}"))),
            }
        }
        let mut lost = Vec::new();
        let mut install_failed = std::collections::HashSet::new();
        // A host that cannot have the agent fails the run (unless it holds
        // only `--from` sources): then no agent gets its keys, so no command
        // starts anywhere, as when every host was readied before any agent.
        let doomed = started.iter().enumerate().any(|(i, s)| {
            matches!(s, Some(Err(StartFailure::Install(_)))) && self.plan.source_of(i).is_none()
        });
        for (i, spawned) in started.into_iter().enumerate() {
            if self.plan.merge_of_lane(i).is_some() || self.segs[i].not_started {
                continue;
            }
            let Some(spawned) = spawned else {
                self.segs[i].exited = true;
                continue;
            };
            if doomed && matches!(spawned, Ok(Spawned::Ready { .. } | Spawned::Refused { .. })) {
                // Its channel closes without a key line: it ends at once.
                self.segs[i].exited = true;
                continue;
            }
            // The keys of its two hops, and the request for byte counts when
            // there is a progress line.
            let me = Node::Segment(i);
            let keys = KeyLine {
                input: self.hop_key(me, Direction::In),
                output: self.hop_key(me, Direction::Out),
                chain: chain_hops(&self.plan, i, &self.config).then(|| self.keys.chain.clone()),
                lanes: self
                    .plan
                    .lanes_of(i)
                    .into_iter()
                    .filter_map(|l| self.hop_key(Node::Segment(l), Direction::In))
                    .collect(),
            };
            let mut lines = vec![keys.to_string()];
            if args_of[i]
                .as_ref()
                .is_some_and(|(_, argv)| argv.iter().any(|a| a == "--reattach"))
            {
                let mut secret = vec![0u8; 32];
                getrandom::getrandom(&mut secret).expect("the OS random source works");
                lines.push(
                    ToAgent::AttachKey {
                        secret: secret.clone(),
                    }
                    .to_string(),
                );
                self.agents[i].attach.secret = Some(secret);
            }
            if self.progress.is_some() {
                lines.push(ToAgent::Progress.to_string());
            }
            let pid_of = |h: &AgentHandle| h.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
            let host = self.plan.segments[i].host.label().to_string();
            match spawned {
                Ok(Spawned::Ready {
                    handle,
                    ran,
                    sealer,
                }) => {
                    if let Some((via, argv)) = &args_of[i] {
                        debug!(
                            "[{}] agent started on {host}{} ({via}{}): --agent {}",
                            i + 1,
                            pid_of(&handle),
                            ran.as_ref().map(|b| format!(", {b}")).unwrap_or_default(),
                            argv.join(" ")
                        );
                    }
                    if let (Some(bin), Host::Remote(_)) = (ran, &self.plan.segments[i].host) {
                        // For a re-attach's helper.
                        self.agent_bins.insert(i, bin);
                    }
                    if sealer.is_some() {
                        debug!("[{}] control channel sealed (munge, X25519)", i + 1);
                    }
                    self.agents[i].sealer = sealer.map(|s| *s);
                    self.watch_agent(i, handle, &lines).await;
                }
                Ok(Spawned::Refused {
                    handle,
                    error,
                    replay,
                }) => {
                    debug!(
                        "[{}] agent started on {host}{}, its channel not sealed",
                        i + 1,
                        pid_of(&handle)
                    );
                    if let Some(e) = error {
                        self.launch_failed(e);
                    }
                    // What the agent said instead comes first.
                    if let Some(l) = replay {
                        let _ = self.events.tx.send(Event::Line(i, 0, l));
                    }
                    // No key: its channel closes, and it ends.
                    self.watch_agent(i, handle, &[]).await;
                    self.agents[i].stdin = None;
                }
                Ok(Spawned::Probed(_)) => {
                    // (start_agent answers a probe's answer itself.)
                    self.segs[i].exited = true;
                    let seg = self.seg_desc(i);
                    let message = "the host answered the probe again".to_string();
                    self.fail(Some(me), Cause::Segment { seg, message });
                }
                Err(StartFailure::Install(error)) => {
                    self.segs[i].exited = true;
                    let host = self.plan.segments[i].host.label().to_string();
                    if self.plan.source_of(i).is_some() {
                        lost.push((i, Cause::Install { host, error }));
                    } else if install_failed.insert(host.clone()) {
                        // Once per host, as every segment there fails alike.
                        self.fail(Some(me), Cause::Install { host, error });
                    }
                }
                Err(StartFailure::Launch(e)) => {
                    self.segs[i].exited = true;
                    let seg = self.seg_desc(i);
                    let message = e.cause.to_string();
                    let cause = Cause::Segment { seg, message };
                    if self.plan.source_of(i).is_some() {
                        // That source alone, once every agent is watched.
                        lost.push((i, cause));
                    } else {
                        self.fail(Some(Node::Segment(i)), cause);
                    }
                }
            }
        }
        self.lanes_follow_merge();
        for (i, cause) in lost {
            self.source_lost(i, cause).await;
        }
        self.give_up_lanes().await;
    }

    /// A line merge's lanes share their merge segment's agent: if it did not
    /// start, neither did they.
    pub(super) fn lanes_follow_merge(&mut self) {
        for i in 0..self.segs.len() {
            if let Some(m) = self.plan.merge_of_lane(i) {
                if self.segs[m].exited {
                    self.segs[i].exited = true;
                }
            }
        }
    }

    /// Hands agent `i` its first `lines` (the key line, `PROGRESS`; sealed on
    /// an srun channel) and starts the tasks that forward its stderr and turn
    /// its stdout lines and exit into events.
    async fn watch_agent(&mut self, i: usize, h: AgentHandle, lines: &[String]) {
        let AgentHandle {
            stdin,
            stdout,
            stderr,
            pid,
            wait,
        } = h;
        self.agents[i].pid = pid;
        self.agents[i].stdin = Some(stdin);
        // A failure here is reported through the agent's exit. What follows
        // the key line is recorded for a re-attach ([`super::reattach`]).
        for l in lines {
            self.send_line(i, l).await;
            self.agents[i].attach.logging = true;
        }
        self.watch_channel(i, stdout, stderr, wait);
    }

    /// Starts the tasks that forward agent `i`'s stderr and turn its stdout
    /// lines (complete ones) and its channel's end into events.
    pub(super) fn watch_channel(
        &mut self,
        i: usize,
        stdout: rdpipe_launch::Reader,
        stderr: Option<rdpipe_launch::Reader>,
        wait: rdpipe_launch::WaitFuture,
    ) {
        // Local stderr keeps its own words, as when inherited.
        let prefix = if self.is_local(i) {
            String::new()
        } else {
            format!(
                "{} ",
                rdpipe_term::prefix(self.plan.segments[i].host.label())
            )
        };
        let stderr_task = stderr.map(|serr| {
            tokio::spawn(async move {
                let mut r = BufReader::new(serr);
                let mut buf = Vec::new();
                while let Ok(1..) = r.read_until(b'\n', &mut buf).await {
                    stderr_line(&prefix, &buf);
                    buf.clear();
                }
            })
        });
        let tx = self.events.tx.clone();
        let gen = self.agents[i].attach.gen;
        self.agents[i].attach.heard = Some(std::time::Instant::now());
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            while let Ok(1..) = r.read_until(b'\n', &mut buf).await {
                if buf.last() != Some(&b'\n') {
                    // Cut short by the channel's end: sent again after a
                    // re-attach, if there is one.
                    break;
                }
                let l = String::from_utf8_lossy(&buf).trim_end().to_string();
                let m = match l == "PONG" {
                    true => Event::Pong(i, gen),
                    false => Event::Line(i, gen, l),
                };
                let _ = tx.send(m);
                buf.clear();
            }
            if let Some(t) = stderr_task {
                // A background process may hold stderr open: bounded.
                let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
            }
            let (code, text) = wait.await;
            let _ = tx.send(Event::Exited(i, gen, code, text));
        });
    }
}
