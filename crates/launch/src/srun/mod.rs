//! Slurm's `srun` as the way to start agents (`--launcher srun`), where a
//! cluster runs processes on its nodes through the workload manager (slurmd
//! and munge), not ssh. Each remote segment's agent is one job step of the
//! current allocation on its node: `srun --jobid J -w NODE -N1 -n1 --overlap
//! --unbuffered sh -c 'exec LINE'`; the step's stdin and stdout are the agent's
//! control channel, as an ssh session's are. Slurm carries a step's I/O as
//! plain TCP, so the channel is first agreed through munge and sealed
//! ([`rdpipe_control::seal`], the agent's `--munge`): the keys travel on
//! stdin, sealed, never in clear text, argv or the environment. The probe and
//! the upload of self-install (nothing secret) run as steps too.
//!
//! Every step of a run is named `rdpipe.PID`; teardown cancels whatever step
//! of that name is still alive ([`Srun::cancel_steps`]), so nothing is left
//! in `squeue -s` after a failure or Ctrl-C. Node names are Slurm's; a node's
//! data address is its `NodeAddr` (`scontrol show node`) unless `--data-host`
//! says otherwise.
//!
//! Before any step starts, [`SrunLauncher`]'s `prepare` checks the
//! allocation: every remote host must be one of its nodes (one error per
//! host that is not), and munge must work on this host.

mod allocation;
mod trust;

pub use allocation::{Srun, SrunError};

use crate::install::start::{agent_command_line, settle, Started};
use crate::launcher::{
    AgentStart, Boxed, LaunchCause, LaunchError, Launcher, LauncherKind, ShellOutput, Spawned,
};
use rdpipe_plan::{Host, RemoteHost};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

/// Starts agents as job steps of a Slurm allocation.
pub struct SrunLauncher {
    /// `--jobid`, else `SLURM_JOB_ID`.
    jobid: Option<String>,
    /// How long an agent's sealed-channel answer may take.
    seal_limit: Duration,
    /// Whether `--persist` was given (it does nothing here: said once).
    persist: bool,
    /// The allocation, once checked.
    srun: std::sync::Mutex<Option<Arc<Srun>>>,
}

impl SrunLauncher {
    /// A launcher for the allocation `jobid` (else `SLURM_JOB_ID`); nothing
    /// is asked of Slurm before [`Launcher::prepare`].
    pub fn new(jobid: Option<String>, seal_limit: Duration, persist: bool) -> Self {
        SrunLauncher {
            jobid,
            seal_limit,
            persist,
            srun: std::sync::Mutex::new(None),
        }
    }

    fn error(host: Option<&str>, seg: Option<usize>, cause: LaunchCause) -> LaunchError {
        let e = LaunchError::new(LauncherKind::Srun, host, cause);
        match seg {
            Some(s) => e.at(s),
            None => e,
        }
    }

    fn not_ready(host: &RemoteHost, seg: usize) -> LaunchError {
        Self::error(
            Some(&host.spec),
            Some(seg),
            LaunchCause::Allocation("the Slurm allocation was not checked".into()),
        )
    }
}

/// `srun`'s command for `line` on `node`, stdin, stdout and stderr piped.
fn step(srun: &Srun, node: &str, line: &str, stdin: Stdio) -> tokio::process::Command {
    let mut c = srun.command(node, line);
    c.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

impl Launcher for SrunLauncher {
    fn kind(&self) -> LauncherKind {
        LauncherKind::Srun
    }

    fn describe_host(&self, host: &Host) -> String {
        match host {
            Host::Local => "local, no srun".to_string(),
            Host::Remote(r) => format!("srun {}", r.name),
        }
    }

    fn describe_hosts(&self, hosts: &[(RemoteHost, Vec<usize>)]) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if hosts.is_empty() {
            return s;
        }
        let _ = writeln!(s, "srun steps:");
        for (r, segs) in hosts {
            let _ = writeln!(
                s,
                "  {}: {} segment(s), one job step each",
                r.spec,
                segs.len()
            );
        }
        s
    }

    fn data_address(&self, host: &RemoteHost) -> String {
        Srun::node_addr(&host.name)
    }

    fn address_origin(&self) -> &'static str {
        "slurm"
    }

    fn prepare<'a>(
        &'a self,
        hosts: &'a [(RemoteHost, Vec<usize>)],
    ) -> Boxed<'a, Result<(), Vec<LaunchError>>> {
        Box::pin(async move {
            let jobid = self.jobid.clone();
            let checked = tokio::task::spawn_blocking(move || {
                let mut s = Srun::new(jobid.as_deref())?;
                let nodes = s.nodes()?;
                s.munge_socket = Srun::read_munge_socket();
                // munge must work here before any step starts: without it no
                // agent's channel can be sealed, and keys never go in clear text.
                let here = rdpipe_control::munge::host_name();
                let uid = rustix::process::getuid().as_raw();
                rdpipe_control::munge::encode(&here, s.munge_socket.as_deref(), uid, b"")?;
                Ok::<_, SrunError>((s, nodes))
            })
            .await;
            let (srun, nodes) = match checked {
                Ok(Ok(x)) => x,
                Ok(Err(e)) => {
                    return Err(vec![Self::error(
                        None,
                        None,
                        LaunchCause::Allocation(e.to_string()),
                    )])
                }
                Err(e) => {
                    return Err(vec![Self::error(
                        None,
                        None,
                        LaunchCause::Local(format!("srun task failed: {e}")),
                    )])
                }
            };
            debug!(
                "--launcher srun: job {}, nodes {}, steps named {}, munge socket {:?}",
                srun.job,
                nodes.join(","),
                srun.step_name,
                srun.munge_socket
            );
            if self.persist {
                tracing::warn!(
                    "--persist keeps ssh connections; with --launcher srun it does nothing"
                );
            }
            let mut errors = Vec::new();
            for (host, segs) in hosts {
                let message = if host.user.is_some() || host.port.is_some() {
                    "a job step runs as the job's user on the node: name the node alone (no \
                     user@, no port) with --launcher srun"
                        .to_string()
                } else if !nodes.contains(&host.name) {
                    format!(
                        "not a node of Slurm job {} (its nodes: {}); name nodes as Slurm \
                         does, or allocate this one",
                        srun.job,
                        nodes.join(",")
                    )
                } else {
                    continue;
                };
                errors.push(Self::error(
                    Some(&host.spec),
                    Some(segs[0]),
                    LaunchCause::Allocation(message),
                ));
            }
            if !errors.is_empty() {
                return Err(errors);
            }
            *self.srun.lock().expect("not poisoned") = Some(Arc::new(srun));
            Ok(())
        })
    }

    fn shell(
        &self,
        seg: usize,
        host: &RemoteHost,
        line: String,
        input: Option<Arc<Vec<u8>>>,
    ) -> Boxed<'static, Result<ShellOutput, LaunchError>> {
        let srun = self.srun.lock().expect("not poisoned").clone();
        let host = host.clone();
        Box::pin(async move {
            let srun = srun.ok_or_else(|| Self::not_ready(&host, seg))?;
            let fail = |m: String| Self::error(Some(&host.spec), Some(seg), LaunchCause::Shell(m));
            let stdin = if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            };
            let mut ch = step(&srun, &host.name, &line, stdin).spawn().map_err(|e| {
                fail(format!(
                    "cannot run srun: {e} (is Slurm's client installed?)"
                ))
            })?;
            crate::install::feed(input, ch.stdin.take()).await;
            match ch.wait_with_output().await {
                Ok(o) => Ok(ShellOutput::of(o)),
                Err(e) => Err(fail(format!("srun failed: {e}"))),
            }
        })
    }

    fn spawn_agent(&self, start: AgentStart) -> Boxed<'static, Result<Spawned, LaunchError>> {
        let srun = self.srun.lock().expect("not poisoned").clone();
        let limit = self.seal_limit;
        Box::pin(async move {
            let Host::Remote(host) = &start.host else {
                unreachable!("the srun launcher starts remote segments only");
            };
            let srun = srun.ok_or_else(|| Self::not_ready(host, start.seg))?;
            let mut settings = start.settings.clone();
            settings.munge = true;
            settings.munge_socket = srun.munge_socket.clone();
            let argv = crate::launcher::agent_argv(&settings);
            let line = agent_command_line(&start.program, &argv, &start.env);
            let ch = step(&srun, &host.name, &line, Stdio::piped())
                .process_group(0)
                .spawn()
                .map_err(|e| {
                    Self::error(
                        Some(&host.spec),
                        Some(start.seg),
                        LaunchCause::Start(format!(
                            "cannot run srun: {e} (is Slurm's client installed?)"
                        )),
                    )
                })?;
            let handle = crate::local::local_handle(ch);
            let fail = |m| Self::error(Some(&host.spec), Some(start.seg), LaunchCause::Start(m));
            let (bin, mut handle) = match settle(&start.program, handle).await.map_err(fail)? {
                Started::Agent(bin, handle) => (bin, handle),
                Started::Probed(out) => return Ok(Spawned::Probed(out)),
            };
            // The channel is sealed first; nothing of the run's keys goes
            // down one that is not.
            match trust::seal(&mut handle, &host.name, srun.munge_socket.clone(), limit).await {
                Ok(sealer) => Ok(Spawned::Ready {
                    handle,
                    ran: Some(bin),
                    sealer: Some(Box::new(sealer)),
                }),
                Err(r) => Ok(Spawned::Refused {
                    handle,
                    error: r.cause.map(|e| e.at(start.seg)),
                    replay: r.replay,
                }),
            }
        })
    }

    fn close(&self) -> Boxed<'_, ()> {
        let srun = self.srun.lock().expect("not poisoned").take();
        Box::pin(async move {
            if let Some(s) = srun {
                // Steps whose srun was killed may outlive it: nothing of this
                // run stays in the allocation.
                let _ = tokio::task::spawn_blocking(move || s.cancel_steps()).await;
            }
        })
    }
}
