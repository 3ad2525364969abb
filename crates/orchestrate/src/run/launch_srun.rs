//! The run's side of `--launcher srun` ([`crate::srun`]): the allocation is
//! checked before anything starts (every remote host must be one of its
//! nodes: one line per host that is not; munge must work on this host), and
//! each remote segment's agent is an `srun` job step whose stdin, stdout and
//! stderr are those of the local `srun` process, as a local agent's are; its
//! channel is sealed before any key goes down it ([`super::srun_trust`]).

use super::spawn::{AgentHandle, Masters};
use super::verdict::Cause;
use super::Runner;
use crate::plan::Node;
use crate::srun::Srun;
use std::process::Stdio;
use std::sync::Arc;
use tracing::debug;

impl Runner {
    /// The srun "masters": the allocation, checked against the pipeline's
    /// hosts; `None` when it is missing or a host is not in it (reported).
    pub(super) async fn launch_srun(&mut self) -> Option<Masters> {
        let jobid = self.a.jobid.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let mut s = Srun::new(jobid.as_deref())?;
            let nodes = s.nodes()?;
            s.munge_socket = Srun::read_munge_socket();
            // munge must work here before any step starts: without it no
            // agent's channel can be sealed, and keys never go in clear text.
            let here = crate::munge::host_name();
            let uid = rustix::process::getuid().as_raw();
            crate::munge::encode(&here, s.munge_socket.as_deref(), uid, b"")?;
            Ok::<_, crate::srun::SrunError>((s, nodes))
        })
        .await;
        let (srun, nodes) = match checked {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                self.fail(None, Cause::Local(e.to_string()));
                return None;
            }
            Err(e) => {
                self.fail(None, Cause::Local(format!("srun task failed: {e}")));
                return None;
            }
        };
        debug!(
            "--launcher srun: job {}, nodes {}, steps named {}, munge socket {:?}",
            srun.job,
            nodes.join(","),
            srun.step_name,
            srun.munge_socket
        );
        if self.a.persist.is_some() {
            tracing::warn!("--persist keeps ssh connections; with --launcher srun it does nothing");
        }
        let mut ok = true;
        for (host, segs) in self.p.remote_hosts() {
            if host.user.is_some() || host.port.is_some() {
                ok = false;
                let message = "a job step runs as the job's user on the node: name the node \
                               alone (no user@, no port) with --launcher srun"
                    .to_string();
                self.fail(
                    Some(Node::Segment(segs[0])),
                    Cause::Srun {
                        host: host.spec.clone(),
                        message,
                    },
                );
            } else if !nodes.contains(&host.name) {
                ok = false;
                let message = format!(
                    "not a node of Slurm job {} (its nodes: {}); name nodes as Slurm does, \
                     or allocate this one",
                    srun.job,
                    nodes.join(",")
                );
                self.fail(
                    Some(Node::Segment(segs[0])),
                    Cause::Srun {
                        host: host.spec.clone(),
                        message,
                    },
                );
            }
        }
        ok.then(|| Masters {
            srun: Some(Arc::new(srun)),
            ..Masters::default()
        })
    }
}

/// Starts `line` on `node` as a job step.
pub(super) fn spawn_srun(srun: &Srun, node: &str, line: &str) -> Result<AgentHandle, String> {
    let mut c = srun.command(node, line);
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let ch = c
        .spawn()
        .map_err(|e| format!("cannot run srun: {e} (is Slurm's client installed?)"))?;
    Ok(super::spawn::local_handle(ch))
}
