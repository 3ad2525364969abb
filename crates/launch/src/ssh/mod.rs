//! `--launcher ssh` (the default): one OpenSSH master connection per host and
//! per `--max-sessions` of its segments, all started at once (at most
//! [`MAX_PARALLEL_STARTS`] logging in at a time); each agent, probe and
//! upload is a native-mux session on its host's master. `--persist` keeps
//! the masters for the next run ([`crate::persist`]).

mod master;

pub use master::{alive_count_max, Master, SshConfig, SshError};

use crate::install::start::{agent_command_line, settle, Started};
use crate::launcher::{
    AgentHandle, AgentStart, Boxed, LaunchCause, LaunchError, Launcher, LauncherKind, Reader,
    ShellOutput, Spawned, WaitFuture,
};
use rdpipe_plan::{Host, RemoteHost};
use std::collections::HashMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::debug;

/// The most SSH masters starting at once (and, as many, self-install
/// probes and agent sessions opening): each master is a key exchange and a
/// login, costing this machine CPU; past a few dozen at once they only slow
/// each other (and sshd's `MaxStartups` elsewhere may refuse bursts from one
/// client). See docs/fanout.md for the set-up time per host.
pub const MAX_PARALLEL_STARTS: usize = 32;

/// The longest pause between two attempts to start a lost master again: a
/// refused attempt costs a fork of ssh and its guard, and the session's
/// return is noticed within this (as a data hop's redial, every 0.5 s).
const RENEW_PAUSE_MAX: Duration = Duration::from_millis(500);

/// Starts agents through ssh master connections.
pub struct SshLauncher {
    ssh: SshConfig,
    /// Segments per master (`--max-sessions`).
    max_sessions: u32,
    /// `--persist`: how long masters outlive the run.
    persist: Option<Duration>,
    /// This executable: each master runs under its `--ssh-guard`.
    exe: PathBuf,
    /// What `prepare` started.
    state: std::sync::Mutex<Connections>,
    /// Bounds the sessions opening at once for agents.
    starts: Arc<tokio::sync::Semaphore>,
}

/// The masters of a run.
#[derive(Default)]
struct Connections {
    /// The run's directory of control sockets (none with `--persist`).
    dir: Option<tempfile::TempDir>,
    masters: Vec<Master>,
    /// Each master's host and control socket (the last one started for it).
    ends: Vec<(RemoteHost, PathBuf)>,
    /// Per master: held while its connection is being re-established, with
    /// how many times it was.
    renewals: Vec<Arc<tokio::sync::Mutex<u32>>>,
    /// Per master: the `FAREWELL` lines its guard has (a renewed master's
    /// guard gets them too).
    farewells: Vec<Vec<String>>,
    /// Per master: when it came up.
    started: Vec<Instant>,
    /// Segment index → index into `masters`.
    of_segment: HashMap<usize, usize>,
}

impl SshLauncher {
    /// A launcher that will call ssh with `ssh` (nothing starts before
    /// [`Launcher::prepare`]).
    pub fn new(ssh: SshConfig, max_sessions: u32, persist: Option<Duration>, exe: PathBuf) -> Self {
        SshLauncher {
            ssh,
            max_sessions,
            persist,
            exe,
            state: Default::default(),
            starts: Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_STARTS)),
        }
    }

    fn session(&self, seg: usize) -> Option<Arc<openssh::Session>> {
        let c = self.state.lock().expect("not poisoned");
        let m = *c.of_segment.get(&seg)?;
        Some(c.masters[m].session.clone())
    }

    /// Segment `seg`'s master, started again if it is gone or was started
    /// before `stale` (one at a time per master; retried with backoff until
    /// `deadline`).
    async fn renew(
        &self,
        seg: usize,
        deadline: Instant,
        stale: Option<Instant>,
    ) -> Result<Arc<openssh::Session>, String> {
        let (k, lock) = {
            let c = self.state.lock().expect("not poisoned");
            let k = *c
                .of_segment
                .get(&seg)
                .ok_or("no ssh connection to this host")?;
            (k, c.renewals[k].clone())
        };
        let mut renewed = lock.lock().await;
        let mut pause = Duration::from_millis(100);
        let mut last = String::from("the ssh connection was lost");
        loop {
            let (session, since) = {
                let c = self.state.lock().expect("not poisoned");
                match (c.masters.get(k), c.started.get(k)) {
                    (Some(m), Some(&t)) => (m.session.clone(), t),
                    // Closed meanwhile (teardown).
                    _ => return Err("the run is ending".into()),
                }
            };
            let stalled = stale.is_some_and(|t| since <= t);
            if !stalled && session.check().await.is_ok() {
                return Ok(session);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(last);
            }
            *renewed += 1;
            let (host, ctl) = self.renewal_socket(k, *renewed)?;
            debug!("ssh master {} for {}: starting it again", k + 1, host.spec);
            let start = async {
                match self.persist {
                    None => Master::launch(&self.ssh, &host, &ctl, &self.exe).await,
                    Some(keep) => Master::persistent(&self.ssh, &host, &ctl, keep)
                        .await
                        .map(|(m, _)| m),
                }
            };
            // (Dropping a master that is still logging in ends its guard.)
            let started = tokio::time::timeout(left, start).await;
            match started {
                Ok(Ok(m)) => {
                    let old = {
                        let mut c = self.state.lock().expect("not poisoned");
                        if c.masters.len() <= k {
                            // Closed meanwhile (teardown): this one too.
                            tokio::spawn(m.close());
                            return Err("the run is ending".into());
                        }
                        c.ends[k].1 = ctl.clone();
                        c.started[k] = Instant::now();
                        for f in &c.farewells[k] {
                            m.tell_guard(farewell_line(&self.ssh, &host, &ctl, f));
                        }
                        std::mem::replace(&mut c.masters[k], m)
                    };
                    tokio::spawn(old.close());
                }
                Ok(Err(e)) => {
                    last = e.to_string();
                    debug!("ssh master {} for {}: {last}", k + 1, host.spec);
                    tokio::time::sleep(
                        pause.min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                    pause = (pause * 2).min(RENEW_PAUSE_MAX);
                }
                Err(_) => return Err(last),
            }
        }
    }

    /// The host of master `k` and a control socket for its `n`-th renewal
    /// (`--persist`: the same one).
    fn renewal_socket(&self, k: usize, n: u32) -> Result<(RemoteHost, PathBuf), String> {
        let c = self.state.lock().expect("not poisoned");
        let (host, ctl) = c.ends.get(k).cloned().ok_or("the run is ending")?;
        let Some(dir) = &c.dir else {
            return Ok((host, ctl));
        };
        let sub = dir.path().join(format!("m{k}r{n}"));
        // The old master's guard removes the run's directory when it leaves
        // it empty: make it again.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&sub)
            .map_err(|e| format!("cannot create {}: {e}", sub.display()))?;
        Ok((host, sub.join("ctl")))
    }

    fn error(host: &RemoteHost, seg: usize, cause: LaunchCause) -> LaunchError {
        LaunchError::new(LauncherKind::Ssh, Some(&host.spec), cause).at(seg)
    }
}

/// The guard's `FAREWELL ARGV INPUT` line for `f` (the remote line and its
/// input, NUL between): `ssh` through the master at `ctl` running the line.
fn farewell_line(ssh: &SshConfig, host: &RemoteHost, ctl: &std::path::Path, f: &str) -> String {
    let (line, input) = f.split_once('\0').unwrap_or((f, ""));
    let mut argv: Vec<String> = vec!["ssh".into()];
    argv.extend(ssh.args(host));
    argv.extend([
        "-S".into(),
        ctl.display().to_string(),
        "-o".into(),
        "ControlMaster=no".into(),
        "--".into(),
        host.destination(),
        line.to_string(),
    ]);
    format!(
        "FAREWELL {} {}",
        rdpipe_control::encode_hex(argv.join("\0").as_bytes()),
        rdpipe_control::encode_hex(input.as_bytes())
    )
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
            Ok(s) => (s.code(), rdpipe_agent::command::describe_exit(s)),
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

/// Runs `line` in a session on `session`'s master, `input` on its stdin.
async fn ssh_sh(
    session: Arc<openssh::Session>,
    line: String,
    input: Option<Arc<Vec<u8>>>,
) -> Result<ShellOutput, String> {
    let mut cmd = openssh::Session::to_raw_command(session, line);
    cmd.stdin(if input.is_some() {
        openssh::Stdio::piped()
    } else {
        openssh::Stdio::null()
    })
    .stdout(openssh::Stdio::piped())
    .stderr(openssh::Stdio::piped());
    let mut ch = cmd
        .spawn()
        .await
        .map_err(|e| format!("cannot open an ssh session: {e}"))?;
    crate::install::feed(input, ch.stdin().take()).await;
    match ch.wait_with_output().await {
        Ok(o) => Ok(ShellOutput::of(o)),
        // Native mux reports status 127 (no such program) this way.
        Err(openssh::Error::Remote(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(ShellOutput {
                code: Some(127),
                stdout: String::new(),
                stderr: String::new(),
            })
        }
        Err(e) => Err(format!("the ssh session failed: {e}")),
    }
}

impl Launcher for SshLauncher {
    fn kind(&self) -> LauncherKind {
        LauncherKind::Ssh
    }

    fn describe_host(&self, host: &Host) -> String {
        match host {
            Host::Local => "local, no ssh".to_string(),
            Host::Remote(r) => {
                format!("ssh {}", r.destination())
                    + &r.port.map(|p| format!(" port {p}")).unwrap_or_default()
            }
        }
    }

    fn describe_hosts(&self, hosts: &[(RemoteHost, Vec<usize>)]) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if hosts.is_empty() {
            return s;
        }
        let per = self.max_sessions.max(1) as usize;
        let _ = writeln!(s, "ssh connections:");
        for (r, segs) in hosts {
            let _ = writeln!(
                s,
                "  {}: {} segment(s) over {} connection(s)",
                r.spec,
                segs.len(),
                segs.len().div_ceil(per)
            );
        }
        s
    }

    fn data_address(&self, host: &RemoteHost) -> String {
        self.ssh.hostname(host)
    }

    fn address_origin(&self) -> &'static str {
        "ssh"
    }

    fn prepare<'a>(
        &'a self,
        hosts: &'a [(RemoteHost, Vec<usize>)],
    ) -> Boxed<'a, Result<(), Vec<LaunchError>>> {
        Box::pin(async move {
            let per = self.max_sessions.max(1) as usize;
            let mut jobs = Vec::new();
            for (host, segs) in hosts {
                for chunk in segs.chunks(per) {
                    jobs.push((host.clone(), chunk.to_vec()));
                }
            }
            let local =
                |m: String| LaunchError::new(LauncherKind::Ssh, None, LaunchCause::Local(m));
            // A directory per master, all made before any master starts: a
            // master's guard removes its own when the master ends, and the
            // run's directory when that leaves it empty (see `guard::main`).
            let mut ctls = Vec::new();
            match self.persist {
                Some(_) => {
                    let pd = crate::persist::dir()
                        .map_err(|e| vec![local(format!("--persist: {e}"))])?;
                    for (n, (host, _)) in jobs.iter().enumerate() {
                        // Per host, the k-th master of this run: stable across runs.
                        let k = jobs[..n].iter().filter(|(h, _)| h == host).count();
                        ctls.push(crate::persist::socket(
                            &pd,
                            &self.ssh.args(host),
                            &host.destination(),
                            k,
                        ));
                    }
                }
                None if !jobs.is_empty() => {
                    let dir = tempfile::Builder::new()
                        .prefix("rdpipe-")
                        .tempdir_in(crate::runtime_dir())
                        .map_err(|e| {
                            vec![local(format!("cannot create a control directory: {e}"))]
                        })?;
                    for n in 0..jobs.len() {
                        let sub = dir.path().join(format!("m{n}"));
                        if let Err(e) = std::fs::create_dir(&sub) {
                            tracing::warn!("cannot create {}: {e}", sub.display());
                        }
                        ctls.push(sub.join("ctl"));
                    }
                    self.state.lock().expect("not poisoned").dir = Some(dir);
                }
                None => {}
            }
            let persist = self.persist;
            let mut set = tokio::task::JoinSet::new();
            let bound = Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_STARTS));
            for (n, (host, _)) in jobs.iter().enumerate() {
                let bound = bound.clone();
                let ssh = self.ssh.clone();
                let host = host.clone();
                let ctl = ctls[n].clone();
                let exe = self.exe.clone();
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
                    let m =
                        match persist {
                            None => Master::launch(&ssh, &host, &ctl, &exe).await,
                            Some(keep) => Master::persistent(&ssh, &host, &ctl, keep).await.map(
                                |(m, reused)| {
                                    if reused {
                                        debug!(
                                            "ssh master {} for {}: reusing {}",
                                            n + 1,
                                            host.spec,
                                            ctl.display()
                                        );
                                    }
                                    m
                                },
                            ),
                        };
                    if m.is_ok() {
                        let ms = t.elapsed().as_millis();
                        debug!("ssh master {} for {} is up after {ms} ms", n + 1, host.spec);
                    }
                    (n, m)
                });
            }
            let mut got: Vec<Option<Master>> = (0..jobs.len()).map(|_| None).collect();
            let mut errors = Vec::new();
            while let Some(r) = set.join_next().await {
                match r {
                    Ok((n, Ok(m))) => got[n] = Some(m),
                    Ok((n, Err(e))) => errors.push(Self::error(
                        &jobs[n].0,
                        jobs[n].1[0],
                        LaunchCause::Connect(e.to_string()),
                    )),
                    Err(e) => errors.push(local(format!("ssh launch task failed: {e}"))),
                }
            }
            let mut c = self.state.lock().expect("not poisoned");
            for (n, m) in got.into_iter().enumerate() {
                if let Some(m) = m {
                    let k = c.masters.len();
                    for &s in &jobs[n].1 {
                        c.of_segment.insert(s, k);
                    }
                    c.masters.push(m);
                    c.ends.push((jobs[n].0.clone(), ctls[n].clone()));
                    c.renewals.push(Default::default());
                    c.farewells.push(Vec::new());
                    c.started.push(Instant::now());
                }
            }
            drop(c);
            if errors.is_empty() {
                Ok(())
            } else {
                // The masters that did start are closed by `close`.
                Err(errors)
            }
        })
    }

    fn shell(
        &self,
        seg: usize,
        host: &RemoteHost,
        line: String,
        input: Option<Arc<Vec<u8>>>,
    ) -> Boxed<'static, Result<ShellOutput, LaunchError>> {
        let session = self.session(seg);
        let host = host.clone();
        Box::pin(async move {
            let Some(session) = session else {
                return Err(Self::error(
                    &host,
                    seg,
                    LaunchCause::Shell("no ssh connection to this host".into()),
                ));
            };
            ssh_sh(session, line, input)
                .await
                .map_err(|m| Self::error(&host, seg, LaunchCause::Shell(m)))
        })
    }

    fn spawn_agent(&self, start: AgentStart) -> Boxed<'static, Result<Spawned, LaunchError>> {
        let session = self.session(start.seg);
        let max = self.max_sessions;
        let starts = self.starts.clone();
        Box::pin(async move {
            let Host::Remote(host) = &start.host else {
                unreachable!("the ssh launcher starts remote segments only");
            };
            let Some(session) = session else {
                return Err(Self::error(
                    host,
                    start.seg,
                    LaunchCause::Start("no ssh connection to this host".into()),
                ));
            };
            let argv = crate::launcher::agent_argv(&start.settings);
            let line = agent_command_line(&start.program, &argv, &start.env);
            // Never closed, so acquiring only waits.
            let permit = starts.acquire_owned().await;
            let fail = |m| Self::error(host, start.seg, LaunchCause::Start(m));
            let handle = spawn_remote(session, line, max).await.map_err(fail)?;
            // The next start need not wait for this one's check.
            drop(permit);
            match settle(&start.program, handle).await.map_err(fail)? {
                Started::Agent(bin, handle) => Ok(Spawned::Ready {
                    handle,
                    ran: Some(bin),
                    sealer: None,
                }),
                Started::Probed(out) => Ok(Spawned::Probed(out)),
            }
        })
    }

    fn reattachable(&self) -> bool {
        true
    }

    fn reattach<'a>(
        &'a self,
        seg: usize,
        host: &'a RemoteHost,
        line: String,
        deadline: Instant,
        stale: Option<Instant>,
    ) -> Boxed<'a, Result<AgentHandle, LaunchError>> {
        Box::pin(async move {
            let session = self
                .renew(seg, deadline, stale)
                .await
                .map_err(|m| Self::error(host, seg, LaunchCause::Connect(m)))?;
            spawn_remote(session, line, self.max_sessions)
                .await
                .map_err(|m| Self::error(host, seg, LaunchCause::Start(m)))
        })
    }

    fn farewell(&self, seg: usize, line: String, input: String) {
        let mut c = self.state.lock().expect("not poisoned");
        let Some(&k) = c.of_segment.get(&seg) else {
            return;
        };
        let (host, ctl) = c.ends[k].clone();
        // Kept encoded with its input; the command is made per master.
        let f = format!("{}\0{}", line, input);
        c.masters[k].tell_guard(farewell_line(&self.ssh, &host, &ctl, &f));
        c.farewells[k].push(f);
    }

    fn close(&self) -> Boxed<'_, ()> {
        let c = std::mem::take(&mut *self.state.lock().expect("not poisoned"));
        Box::pin(async move {
            // All at once: each waits for its master to end (a round trip to
            // its host), which one after another adds up with many hosts.
            let mut closing = tokio::task::JoinSet::new();
            for (n, m) in c.masters.into_iter().enumerate() {
                debug!("teardown: closing ssh master {}", n + 1);
                closing.spawn(m.close());
            }
            while closing.join_next().await.is_some() {}
            drop(c.dir);
        })
    }
}
