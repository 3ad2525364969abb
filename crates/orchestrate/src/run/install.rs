//! The run's side of self-install ([`crate::install`]): before any agent
//! starts, per remote host and in parallel, the probe over the host's SSH
//! master (or as an srun job step), then the choice of the `rdrecv` in PATH, the cached copy or an
//! upload (each bounded in time). Skipped with `--no-install` or
//! `--remote-bin`: then agents start as `rdrecv` from PATH or `DIR/rdrecv`.

use super::spawn::{sh_quote, Masters};
use super::verdict::Cause;
use super::Runner;
use crate::install::{cksum, decide, probe, AgentBinary, AgentId, Choice, InstallError};
use crate::plan::{Node, RemoteHost};
use crate::srun::Srun;
use openssh::Session;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tracing::{debug, info};

/// The agent binary without self-install: `DIR/rdrecv` for `--remote-bin DIR`,
/// else `rdrecv` from PATH.
pub fn default_bin(remote_bin: Option<&str>) -> String {
    match remote_bin {
        Some(d) => format!("{}/rdrecv", d.trim_end_matches('/')),
        None => "rdrecv".to_string(),
    }
}

impl Masters {
    /// The agent binary to run for segment `seg` (a remote one).
    pub(super) fn agent_bin(&self, seg: usize, remote_bin: Option<&str>) -> String {
        self.bins
            .get(&seg)
            .cloned()
            .unwrap_or_else(|| default_bin(remote_bin))
    }
}

/// What a remote `sh -c SCRIPT sh ARGS...` gave.
struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Output {
    fn of(o: std::process::Output) -> Output {
        Output {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// stderr's last line, else the exit status: for messages.
    fn why(&self) -> String {
        match self.stderr.lines().map(str::trim).rfind(|l| !l.is_empty()) {
            Some(l) => l.to_string(),
            None => match self.code {
                Some(c) => format!("exit status {c}"),
                None => "no exit status".to_string(),
            },
        }
    }
}

/// How a probe or an upload reaches its host.
#[derive(Clone)]
pub(crate) enum Via {
    /// A session on the host's SSH master.
    Ssh(Arc<Session>),
    /// A job step on the node (`--launcher srun`).
    Srun(Arc<Srun>, String),
}

/// Runs `sh -c SCRIPT sh ARGS...` on the host (in an ssh session, whatever
/// the login shell is; or as a job step), `input` on its stdin, within `limit`.
async fn remote_sh(
    via: Via,
    script: &str,
    args: &[&str],
    input: Option<Arc<Vec<u8>>>,
    limit: Duration,
) -> Result<Output, String> {
    let line = ["sh", "-c", script, "sh"]
        .iter()
        .chain(args)
        .map(|w| sh_quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let job = async move {
        match via {
            Via::Ssh(session) => ssh_sh(session, line, input).await,
            Via::Srun(srun, node) => srun_sh(&srun, &node, &line, input).await,
        }
    };
    tokio::time::timeout(limit, job)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} s", limit.as_secs())))
}

async fn ssh_sh(
    session: Arc<Session>,
    line: String,
    input: Option<Arc<Vec<u8>>>,
) -> Result<Output, String> {
    let mut cmd = Session::to_raw_command(session, line);
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
    feed(input, ch.stdin().take()).await;
    match ch.wait_with_output().await {
        Ok(o) => Ok(Output::of(o)),
        Err(e) => Err(format!("the ssh session failed: {e}")),
    }
}

/// Writes `input` (if any) to a child's stdin and closes it. A failed write
/// shows in the exit status and stderr.
async fn feed<W: tokio::io::AsyncWrite + Unpin>(input: Option<Arc<Vec<u8>>>, w: Option<W>) {
    if let (Some(data), Some(mut w)) = (input, w) {
        if w.write_all(&data).await.is_ok() {
            let _ = w.shutdown().await;
        }
    }
}

async fn srun_sh(
    srun: &Srun,
    node: &str,
    line: &str,
    input: Option<Arc<Vec<u8>>>,
) -> Result<Output, String> {
    let mut cmd = srun.command(node, line);
    cmd.stdin(if input.is_some() {
        std::process::Stdio::piped()
    } else {
        std::process::Stdio::null()
    })
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    let mut ch = cmd
        .spawn()
        .map_err(|e| format!("cannot run srun: {e} (is Slurm's client installed?)"))?;
    feed(input, ch.stdin.take()).await;
    match ch.wait_with_output().await {
        Ok(o) => Ok(Output::of(o)),
        Err(e) => Err(format!("srun failed: {e}")),
    }
}

/// Finds or installs the agent on one host: the path to run (None: `rdrecv`
/// in PATH). Also `rdpipe doctor`'s way to the agent it probes with.
pub(crate) async fn prepare_host(
    host: RemoteHost,
    session: Via,
    bin: Arc<AgentBinary>,
    limit: Duration,
) -> Result<Option<String>, InstallError> {
    let t = Instant::now();
    let out = remote_sh(
        session.clone(),
        probe::PROBE,
        &["rdrecv", &bin.entry],
        None,
        limit,
    )
    .await
    .map_err(InstallError::Probe)?;
    let p = probe::Probe::parse(&out.stdout).map_err(|e| {
        InstallError::Probe(match out.stderr.trim() {
            "" => e.to_string(),
            _ => format!("{e}; {}", out.why()),
        })
    })?;
    debug!(
        "{}: probed in {} ms: {p:?}",
        host.spec,
        t.elapsed().as_millis()
    );
    let dir = match decide(&p, &bin)? {
        Choice::Installed => return Ok(None),
        Choice::Cached(dir) => {
            debug!("{}: using the cached agent in {dir}", host.spec);
            return Ok(Some(format!("{dir}/rdrecv")));
        }
        Choice::Upload(dir) => dir,
    };
    let why = match &p.path_agent {
        Some(id) => format!(
            "its rdrecv speaks agent protocol {} wire {}",
            id.protocol, id.wire
        ),
        None => "no usable rdrecv in PATH".to_string(),
    };
    info!(
        "{}: {why}; installing this rdpipe ({} bytes) into {dir}",
        host.spec,
        bin.bytes.len()
    );
    let t = Instant::now();
    let data = bin.bytes.clone();
    let (sha, crc) =
        tokio::task::spawn_blocking(move || (cksum::sha256_hex(&data), cksum::posix_cksum(&data)))
            .await
            .map_err(|e| InstallError::Upload {
                dir: dir.clone(),
                message: e.to_string(),
            })?;
    // Generous: 1 s per 256 KiB on top of the usual limit.
    let upload_limit = limit + Duration::from_secs(bin.bytes.len() as u64 >> 18);
    let out = remote_sh(
        session,
        probe::UPLOAD,
        &[&bin.entry, &sha, &crc],
        Some(bin.bytes.clone()),
        upload_limit,
    )
    .await
    .map_err(|message| InstallError::Upload {
        dir: dir.clone(),
        message,
    })?;
    let mut lines = out.stdout.lines().map(str::trim);
    if lines.next() != Some("installed") {
        return Err(InstallError::Upload {
            dir,
            message: out.why(),
        });
    }
    match lines.next().unwrap_or("").parse::<AgentId>() {
        Ok(id) if id == AgentId::this() => {
            info!(
                "{}: installed into {dir} in {} ms",
                host.spec,
                t.elapsed().as_millis()
            );
            Ok(Some(format!("{dir}/rdrecv")))
        }
        _ => Err(InstallError::DoesNotRun {
            dir,
            message: out.why(),
        }),
    }
}

impl Runner {
    /// Finds or installs the agent on every remote host (see the module doc);
    /// false when a host cannot have one (reported).
    pub(super) async fn install_agents(&mut self, masters: &mut Masters) -> bool {
        if !self.a.install || self.a.remote_bin.is_some() {
            return true;
        }
        let hosts = self.p.remote_hosts();
        if hosts.is_empty() {
            return true;
        }
        let exe = self.exe.exe.clone();
        let bin = match tokio::task::spawn_blocking(move || AgentBinary::read(&exe)).await {
            Ok(Ok(b)) => Arc::new(b),
            Ok(Err(e)) => {
                let e = format!(
                    "cannot read my own executable {} to install it: {e}",
                    self.exe.exe.display()
                );
                self.fail(None, Cause::Local(e));
                return false;
            }
            Err(e) => {
                self.fail(None, Cause::Local(format!("install task failed: {e}")));
                return false;
            }
        };
        let limit = Duration::from_secs(self.a.connect_timeout.max(30));
        let mut set = tokio::task::JoinSet::new();
        let bound = Arc::new(tokio::sync::Semaphore::new(
            super::spawn::MAX_PARALLEL_STARTS,
        ));
        for (n, (host, segs)) in hosts.iter().enumerate() {
            let session = match &masters.srun {
                Some(srun) => Via::Srun(srun.clone(), host.name.clone()),
                None => {
                    let Some(&m) = masters.of_segment.get(&segs[0]) else {
                        continue;
                    };
                    Via::Ssh(masters.masters[m].session.clone())
                }
            };
            let (host, bin) = (host.clone(), bin.clone());
            let bound = bound.clone();
            set.spawn(async move {
                // Never closed, so acquiring only waits.
                let _permit = bound.acquire_owned().await;
                (n, prepare_host(host, session, bin, limit).await)
            });
        }
        let mut ok = true;
        while let Some(r) = set.join_next().await {
            match r {
                Ok((n, Ok(path))) => {
                    if let Some(path) = path {
                        for &s in &hosts[n].1 {
                            masters.bins.insert(s, path.clone());
                        }
                    }
                }
                Ok((n, Err(error))) => {
                    ok = false;
                    let host = hosts[n].0.spec.clone();
                    self.fail(
                        Some(Node::Segment(hosts[n].1[0])),
                        Cause::Install { host, error },
                    );
                }
                Err(e) => {
                    ok = false;
                    self.fail(None, Cause::Local(format!("install task failed: {e}")));
                }
            }
        }
        ok
    }
}
