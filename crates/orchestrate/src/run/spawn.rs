//! Starting things: the SSH master connections (one per host and per
//! `--max-sessions` segments on it, in parallel), and one agent per segment
//! (a local `rdpipe --agent` process, or `rdrecv --agent` in a native-mux
//! session on its host's master), each as an [`AgentHandle`]. The agent's key
//! (and `PROGRESS`) go down its stdin; its stdout lines and exit come back as
//! events; its stderr is forwarded line by line, prefixed with the host.

pub use super::agent_args::agent_args;
use super::agent_args::chain_hops;
use super::srun_trust::Refusal;
use super::verdict::Cause;
use super::{ssh_config, Event, Runner};
use crate::control::seal::Sealer;
use crate::control::{Direction, KeyLine, ToAgent};
use crate::plan::{Host, Node};
use crate::ssh::Master;
use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tracing::debug;

/// An agent's control channel (its stdin).
pub type Writer = Box<dyn AsyncWrite + Unpin + Send>;
pub(super) type Reader = Box<dyn AsyncRead + Unpin + Send>;
/// Waits for an agent's exit: (status, description). Only awaited after its
/// stdout and stderr reached end of file: with native mux, finishing the wait
/// closes the mux session, and the master then drops whatever output it had not
/// yet passed on.
pub(super) type WaitFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = (Option<i32>, String)> + Send>>;

/// A started agent.
pub struct AgentHandle {
    /// Its control channel.
    pub(super) stdin: Writer,
    /// Its control lines.
    pub(super) stdout: Reader,
    /// Its stderr, when forwarded (remote, or local with a progress line).
    pub(super) stderr: Option<Reader>,
    /// A local process's pid (the agent's, or its `srun`'s).
    pub(super) pid: Option<u32>,
    /// Its exit.
    pub(super) wait: WaitFuture,
}

/// The SSH masters, and which one each remote segment uses.
#[derive(Default)]
pub struct Masters {
    /// The connections.
    pub masters: Vec<Master>,
    /// Segment index → index into `masters`.
    pub(super) of_segment: HashMap<usize, usize>,
    /// Segment index → the agent binary to run there, when [`super::install`]
    /// chose one.
    pub(super) bins: HashMap<usize, String>,
    /// With `--launcher srun`: the allocation the agents run in (no masters).
    pub(super) srun: Option<std::sync::Arc<crate::srun::Srun>>,
}

/// The most SSH masters (and self-install probes) starting at once: each is
/// a key exchange and a login, costing this machine CPU; past a few dozen at
/// once they only slow each other (and sshd's `MaxStartups` elsewhere may
/// refuse bursts from one client). See docs/fanout.md for the measured
/// set-up time per host.
pub const MAX_PARALLEL_STARTS: usize = 32;

/// A forwarded stderr line, `host: line`, written whole with its control
/// characters escaped (the progress line, if any, is cleared and drawn
/// again).
fn stderr_line(prefix: &str, line: &[u8]) {
    rdpipe_term::forwarded(prefix, line);
}

/// Shell-quotes one word for the remote `sh`.
pub fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@,+%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The endpoint tuning variables set here ([`rdpipe_transport::TUNING_ENV`]),
/// for the agents on other hosts.
fn tuning_env() -> Vec<(String, String)> {
    rdpipe_transport::TUNING_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect()
}

/// The remote shell's command line for an agent: `[env K=V ...] BIN ARGS...`, every
/// word quoted.
pub fn remote_command_line(bin: &str, args: &[String], env: &[(String, String)]) -> String {
    let env_words = (!env.is_empty())
        .then(|| "env".to_string())
        .into_iter()
        .chain(env.iter().map(|(k, v)| sh_quote(&format!("{k}={v}"))));
    env_words
        .chain(std::iter::once(sh_quote(bin)))
        .chain(args.iter().map(|w| sh_quote(w)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Starts a local agent (`EXE ARGS`), its stderr piped when `pipe_stderr`.
fn spawn_local(exe: &Path, args: &[String], pipe_stderr: bool) -> Result<AgentHandle, String> {
    let mut c = tokio::process::Command::new(exe);
    // With a progress line, the local command's stderr goes through the same
    // line writer as remote stderr (which clears the line first); otherwise it
    // is inherited untouched.
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(if pipe_stderr {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .process_group(0)
        .kill_on_drop(true);
    let ch = c
        .spawn()
        .map_err(|e| format!("cannot run the local agent {}: {e}", exe.display()))?;
    Ok(local_handle(ch))
}

/// The handle of a local process (an agent, or the `srun` of one) whose stdin
/// and stdout are piped (its stderr too, unless inherited).
pub(super) fn local_handle(mut ch: tokio::process::Child) -> AgentHandle {
    let stdin = Box::new(ch.stdin.take().expect("piped"));
    let stdout = Box::new(ch.stdout.take().expect("piped"));
    let stderr = ch.stderr.take().map(|e| Box::new(e) as Reader);
    let pid = ch.id();
    let wait: WaitFuture = Box::pin(async move {
        match ch.wait().await {
            Ok(s) => (s.code(), crate::agent::command::describe_exit(s)),
            Err(e) => (None, format!("wait failed: {e}")),
        }
    });
    AgentHandle {
        stdin,
        stdout,
        stderr,
        pid,
        wait,
    }
}

/// Starts a remote agent: `line` in a native-mux session on a master.
async fn spawn_remote(
    session: Arc<openssh::Session>,
    line: String,
    max_sessions: u32,
) -> Result<AgentHandle, String> {
    let mut cmd = openssh::Session::to_raw_command(session, line);
    cmd.stdin(openssh::Stdio::piped())
        .stdout(openssh::Stdio::piped())
        .stderr(openssh::Stdio::piped());
    let mut ch = cmd.spawn().await.map_err(|e| {
        format!(
            "cannot open an ssh session for the agent: {e} (if sshd's MaxSessions there is \
             below {max_sessions}, pass --max-sessions)"
        )
    })?;
    let stdin = Box::new(ch.stdin().take().expect("piped"));
    let stdout = Box::new(ch.stdout().take().expect("piped"));
    let stderr = Some(Box::new(ch.stderr().take().expect("piped")) as Reader);
    let wait: WaitFuture = Box::pin(async move {
        match ch.wait().await {
            Ok(s) => (s.code(), crate::agent::command::describe_exit(s)),
            // Native mux reports status 127 this way.
            Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                (Some(127), "exited with status 127".into())
            }
            Err(e) => (None, format!("ssh channel failed: {e}")),
        }
    });
    Ok(AgentHandle {
        stdin,
        stdout,
        stderr,
        pid: None,
        wait,
    })
}

impl Runner {
    /// Starts every SSH master in parallel; `None` when one failed (reported).
    pub(super) async fn launch_masters(&mut self, dir: &Path) -> Option<Masters> {
        if self.a.launcher == crate::srun::Launcher::Srun {
            return self.launch_srun().await;
        }
        let ssh = ssh_config(&self.a);
        let per = self.a.max_sessions.max(1) as usize;
        let mut jobs = Vec::new();
        for (host, segs) in self.p.remote_hosts() {
            for chunk in segs.chunks(per) {
                jobs.push((host.clone(), chunk.to_vec()));
            }
        }
        // A directory per master, all made before any master starts: a master's
        // guard removes its own when the master ends, and the run's directory
        // when that leaves it empty (see `guard::main`).
        let mut ctls = Vec::new();
        let persist_dir = match self.a.persist.map(|_| crate::persist::dir()).transpose() {
            Ok(d) => d,
            Err(e) => {
                self.fail(None, Cause::Local(format!("--persist: {e}")));
                return None;
            }
        };
        for (n, (host, _)) in jobs.iter().enumerate() {
            if let Some(pd) = &persist_dir {
                // Per host, the k-th master of this run: stable across runs.
                let k = jobs[..n].iter().filter(|(h, _)| h == host).count();
                ctls.push(crate::persist::socket(
                    pd,
                    &ssh.args(host),
                    &host.destination(),
                    k,
                ));
                continue;
            }
            let sub = dir.join(format!("m{n}"));
            if let Err(e) = std::fs::create_dir(&sub) {
                tracing::warn!("cannot create {}: {e}", sub.display());
            }
            ctls.push(sub.join("ctl"));
        }
        let persist = self.a.persist;
        let mut set = tokio::task::JoinSet::new();
        let bound = Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_STARTS));
        for (n, (host, _)) in jobs.iter().enumerate() {
            let bound = bound.clone();
            let ssh = ssh.clone();
            let host = host.clone();
            let ctl = ctls[n].clone();
            let exe = self.exe.exe.clone();
            debug!(
                "starting ssh master {} for {} ({})",
                n + 1,
                host.spec,
                ctl.display()
            );
            set.spawn(async move {
                // Never closed, so acquiring only waits.
                let _permit = bound.acquire_owned().await;
                let t = Instant::now();
                let m = match persist {
                    None => Master::launch(&ssh, &host, &ctl, &exe).await,
                    Some(keep) => {
                        Master::persistent(&ssh, &host, &ctl, keep)
                            .await
                            .map(|(m, reused)| {
                                if reused {
                                    debug!(
                                        "ssh master {} for {}: reusing {}",
                                        n + 1,
                                        host.spec,
                                        ctl.display()
                                    );
                                }
                                m
                            })
                    }
                };
                if m.is_ok() {
                    let ms = t.elapsed().as_millis();
                    debug!("ssh master {} for {} is up after {ms} ms", n + 1, host.spec);
                }
                (n, m)
            });
        }
        let mut got: Vec<Option<Master>> = (0..jobs.len()).map(|_| None).collect();
        let mut ok = true;
        while let Some(r) = set.join_next().await {
            match r {
                Ok((n, Ok(m))) => got[n] = Some(m),
                Ok((n, Err(e))) => {
                    ok = false;
                    let host = jobs[n].0.spec.clone();
                    let message = e.to_string();
                    self.fail(
                        Some(Node::Segment(jobs[n].1[0])),
                        Cause::Ssh { host, message },
                    );
                }
                Err(e) => {
                    ok = false;
                    self.fail(None, Cause::Local(format!("ssh launch task failed: {e}")));
                }
            }
        }
        let mut out = Masters::default();
        for (n, m) in got.into_iter().enumerate() {
            if let Some(m) = m {
                for &s in &jobs[n].1 {
                    out.of_segment.insert(s, out.masters.len());
                }
                out.masters.push(m);
            }
        }
        if ok {
            Some(out)
        } else {
            // Dropping the masters that did start closes them.
            None
        }
    }

    /// Starts one agent per segment and the tasks that read its output.
    pub(super) async fn spawn_agents(&mut self, masters: &Masters) {
        let tuning = tuning_env();
        let n = self.p.segments.len();
        let mut started: Vec<Option<Result<AgentHandle, String>>> = (0..n).map(|_| None).collect();
        let mut args_of = Vec::with_capacity(n);
        // Sessions over the SSH masters open all at once (each is a round
        // trip to its host; one after another they add up with many hosts),
        // at most MAX_PARALLEL_STARTS at a time.
        let mut opening = tokio::task::JoinSet::new();
        let bound = Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_STARTS));
        for (i, slot) in started.iter_mut().enumerate() {
            let args = agent_args(&self.p, i, &self.a);
            match &self.p.segments[i].host {
                Host::Local => {
                    *slot = Some(spawn_local(&self.exe.exe, &args, self.progress.is_some()))
                }
                Host::Remote(r) => {
                    let bin = masters.agent_bin(i, self.a.remote_bin.as_deref());
                    let mut args = args.clone();
                    if let Some(srun) = &masters.srun {
                        args.extend(srun.agent_args());
                    }
                    let line = remote_command_line(&bin, &args, &tuning);
                    match &masters.srun {
                        Some(srun) => {
                            *slot = Some(super::launch_srun::spawn_srun(srun, &r.name, &line))
                        }
                        None => {
                            let session = masters.masters[masters.of_segment[&i]].session.clone();
                            let (max, bound) = (self.a.max_sessions, bound.clone());
                            opening.spawn(async move {
                                // Never closed, so acquiring only waits.
                                let _permit = bound.acquire_owned().await;
                                (i, spawn_remote(session, line, max).await)
                            });
                        }
                    }
                }
            }
            args_of.push(args);
        }
        while let Some(r) = opening.join_next().await {
            match r {
                Ok((i, h)) => started[i] = Some(h),
                Err(e) => self.fail(None, Cause::Local(format!("agent start task failed: {e}"))),
            }
        }
        // srun agents' channels are sealed first, all at once; nothing of the
        // run's keys goes down one that is not.
        let mut sealed: Vec<Option<Result<Sealer, Refusal>>> = (0..n).map(|_| None).collect();
        if let Some(srun) = &masters.srun {
            let limit = Duration::from_secs(self.a.connect_timeout.max(30));
            let mut set = tokio::task::JoinSet::new();
            for (i, slot) in started.iter_mut().enumerate() {
                let Host::Remote(r) = &self.p.segments[i].host else {
                    continue;
                };
                // (A failed spawn stays as it was, to be reported below.)
                if !matches!(slot, Some(Ok(_))) {
                    continue;
                }
                let Some(Ok(mut h)) = slot.take() else {
                    continue;
                };
                let (node, socket) = (r.name.clone(), srun.munge_socket.clone());
                set.spawn(async move {
                    let t = super::srun_trust::seal(&mut h, &node, socket, limit).await;
                    (i, h, t)
                });
            }
            while let Some(r) = set.join_next().await {
                match r {
                    Ok((i, h, t)) => {
                        started[i] = Some(Ok(h));
                        sealed[i] = Some(t);
                    }
                    Err(e) => self.fail(None, Cause::Local(format!("srun seal task failed: {e}"))),
                }
            }
        }
        for (i, spawned) in started.into_iter().enumerate() {
            let Some(spawned) = spawned else {
                self.segs[i].exited = true;
                continue;
            };
            // The keys of its two hops, and the request for byte counts when
            // there is a progress line.
            let me = Node::Segment(i);
            let keys = KeyLine {
                input: self.hop_key(me, Direction::In),
                output: self.hop_key(me, Direction::Out),
                chain: chain_hops(&self.p, i, &self.a).then(|| self.chain_secret.clone()),
            };
            let mut lines = vec![keys.to_string()];
            if self.progress.is_some() {
                lines.push(ToAgent::Progress.to_string());
            }
            match spawned {
                Ok(h) => {
                    let pid = h.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
                    let host = self.p.segments[i].host.label();
                    debug!(
                        "[{}] agent started on {host}{pid}: {}",
                        i + 1,
                        args_of[i].join(" ")
                    );
                    match sealed[i].take() {
                        None => self.watch_agent(i, h, &lines).await,
                        Some(Ok(sealer)) => {
                            debug!("[{}] control channel sealed (munge, X25519)", i + 1);
                            self.sealers[i] = Some(sealer);
                            self.watch_agent(i, h, &lines).await;
                        }
                        Some(Err(refusal)) => {
                            if let Some(cause) = refusal.cause {
                                self.fail(Some(Node::Segment(i)), cause);
                            }
                            // What the agent said instead comes first.
                            if let Some(l) = refusal.replay {
                                let _ = self.tx.send(Event::Line(i, l));
                            }
                            // No key: its channel closes, and it ends.
                            self.watch_agent(i, h, &[]).await;
                            self.stdins[i] = None;
                        }
                    }
                }
                Err(message) => {
                    self.segs[i].exited = true;
                    let seg = self.seg_desc(i);
                    self.fail(Some(Node::Segment(i)), Cause::Segment { seg, message });
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
        self.local_pids[i] = pid;
        self.stdins[i] = Some(stdin);
        // A failure here is reported through the agent's exit.
        for l in lines {
            self.send_line(i, l).await;
        }
        // Local stderr keeps its own words, as when inherited.
        let prefix = if self.is_local(i) {
            String::new()
        } else {
            format!("{} ", rdpipe_term::prefix(self.p.segments[i].host.label()))
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
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            while let Ok(1..) = r.read_until(b'\n', &mut buf).await {
                let l = String::from_utf8_lossy(&buf).trim_end().to_string();
                let _ = tx.send(Event::Line(i, l));
                buf.clear();
            }
            if let Some(t) = stderr_task {
                // A background process may hold stderr open: bounded.
                let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
            }
            let (code, text) = wait.await;
            let _ = tx.send(Event::Exited(i, code, text));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, RemoteHost};
    use crate::run::Config;
    use rdpipe_wire::TransportPref;

    fn config(verbose: u8, quiet: bool, log: Option<&str>) -> Config {
        Config {
            prepared: None,
            segments: vec!["h1:cat".into(), "h2:cat".into()],
            sinks: vec![],
            min_ok: None,
            replay_window: 0,
            dry_run: false,
            verbose,
            quiet,
            progress: false,
            log: log.map(Into::into),
            ssh_options: vec![],
            ssh_config: None,
            data_host: vec![],
            remote_bin: None,
            install: true,
            transport: TransportPref::Rdma,
            integrity: rdpipe_wire::Integrity::Encrypt,
            chunk_size: 1 << 20,
            slots: 2,
            connect_timeout: 30,
            reconnect_timeout: 60,
            handshake_timeout: 10,
            rate_limit: "16M".parse().ok(),
            compress: rdpipe_wire::Compress::Zstd(5),
            max_sessions: 10,
            direct: false,
            persist: None,
            launcher: Default::default(),
            jobid: None,
            summary: true,
        }
    }

    #[test]
    fn remote_command_line_quotes_and_passes_the_tuning_env() {
        let args = vec!["--agent".to_string(), "--label".into(), "h 1[1]".into()];
        assert_eq!(
            remote_command_line("/opt/rd pipe/rdrecv", &args, &[]),
            "'/opt/rd pipe/rdrecv' --agent --label 'h 1[1]'"
        );
        let env = vec![
            ("RDPIPE_TCP_SEND".to_string(), "inline".to_string()),
            ("RDPIPE_RDMA_NO_IMM".to_string(), "1; rm -rf /".to_string()),
        ];
        assert_eq!(
            remote_command_line("rdrecv", &args, &env),
            "env RDPIPE_TCP_SEND=inline 'RDPIPE_RDMA_NO_IMM=1; rm -rf /' rdrecv --agent \
             --label 'h 1[1]'"
        );
    }

    #[test]
    fn agent_args_parse_back_into_the_same_settings() {
        use clap::Parser;
        let a = config(0, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let args = agent_args(&p, 1, &a);
        let parsed = crate::agent::AgentArgs::try_parse_from(
            std::iter::once("rdrecv --agent".to_string()).chain(args.into_iter().skip(1)),
        )
        .unwrap();
        assert_eq!(parsed.transport, TransportPref::Rdma);
        assert_eq!(parsed.integrity, rdpipe_wire::Integrity::Encrypt);
        assert_eq!((parsed.input, parsed.output), p.links(1));
        assert_eq!(parsed.cmd.as_deref(), Some("cat"));
        assert_eq!(parsed.chunk_size, 1 << 20);
        assert_eq!(parsed.rate_limit, "16M".parse().ok());
        assert_eq!(parsed.compress, rdpipe_wire::Compress::Zstd(5));
    }

    #[test]
    fn agents_get_the_verbosity_only_when_asked() {
        let a = config(1, false, None);
        let p = plan(&a.segments, false, &|r: &RemoteHost| r.name.clone()).unwrap();
        let has = |a: &Config, w: &str| agent_args(&p, 0, a).iter().any(|x| x == w);
        for w in ["--verbose", "--quiet", "--log"] {
            assert!(!has(&a, w), "{w}");
        }
        let v = agent_args(&p, 0, &config(5, false, None));
        let i = v.iter().position(|x| x == "--verbose").unwrap();
        assert_eq!(v[i + 1], "3");
        assert!(has(&config(0, true, None), "--quiet"));
        let v = agent_args(&p, 1, &config(0, false, Some("debug")));
        let i = v.iter().position(|x| x == "--log").unwrap();
        assert_eq!(v[i + 1], "debug");
    }

    #[test]
    fn chain_sinks_get_their_relink_roles() {
        use crate::plan::plan_fanout;
        let mut a = config(0, false, None);
        a.replay_window = 1 << 20;
        let sinks = ["b1:cat", "b2:cat", "b3:cat"].map(String::from);
        let p = plan_fanout(&["s:cat".to_string()], &sinks, false, &|r| r.name.clone()).unwrap();
        let roles = |a: &Config, i: usize| {
            let v = agent_args(&p, i, a);
            let w = v
                .iter()
                .position(|x| x == "--replay-window")
                .map(|k| v[k + 1].clone());
            (w, v.iter().any(|x| x == "--chain-in"), chain_hops(&p, i, a))
        };
        assert_eq!(roles(&a, 0), (None, false, false));
        assert_eq!(roles(&a, 1), (Some("1048576".into()), false, true));
        assert_eq!(roles(&a, 2), (Some("1048576".into()), true, true));
        assert_eq!(roles(&a, 3), (None, true, true));
        a.replay_window = 0;
        assert_eq!(roles(&a, 2), (None, false, false));
    }

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("rdrecv"), "rdrecv");
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), "'it'\\''s'");
        assert_eq!(sh_quote(""), "''");
        assert_eq!(
            sh_quote("tr [:lower:] [:upper:]"),
            "'tr [:lower:] [:upper:]'"
        );
    }
}
