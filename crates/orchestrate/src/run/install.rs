//! The run's side of self-install ([`rdpipe_launch::install`]): before any
//! agent starts, per remote host and in parallel, the probe through the
//! host's launcher (an ssh session, or an srun job step), then the choice of
//! the `rdrecv` in PATH, the cached copy or an upload (each bounded in
//! time). Skipped with `--no-install` or `--remote-bin`: then agents start as
//! `rdrecv` from PATH or `DIR/rdrecv`.

use super::verdict::Cause;
use super::Runner;
use rdpipe_launch::install::{prepare_host, AgentBinary};
use rdpipe_launch::MAX_PARALLEL_STARTS;
use rdpipe_plan::Node;
use std::sync::Arc;
use std::time::Duration;

/// Reading this executable and hashing it (for the cache entry's name), on a
/// blocking thread while the hosts are being readied.
pub(super) type BinaryRead = tokio::task::JoinHandle<std::io::Result<AgentBinary>>;

impl Runner {
    /// Starts reading the binary to install, when this run may install it.
    pub(super) fn read_agent_binary(&self) -> Option<BinaryRead> {
        if !self.config.install
            || self.config.remote_bin.is_some()
            || self.plan.remote_hosts().is_empty()
        {
            return None;
        }
        let exe = self.exe.exe.clone();
        Some(tokio::task::spawn_blocking(move || AgentBinary::read(&exe)))
    }

    /// Finds or installs the agent on every remote host (see the module doc)
    /// with the binary `read` reads; false when a host cannot have one
    /// (reported).
    pub(super) async fn install_agents(&mut self, read: Option<BinaryRead>) -> bool {
        let Some(read) = read else {
            return true;
        };
        let hosts = self.plan.remote_hosts();
        let bin = match read.await {
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
        let limit = Duration::from_secs(self.config.connect_timeout.max(30));
        let mut set = tokio::task::JoinSet::new();
        let bound = Arc::new(tokio::sync::Semaphore::new(MAX_PARALLEL_STARTS));
        for (n, (host, segs)) in hosts.iter().enumerate() {
            if segs.iter().all(|&s| self.segs[s].not_started) {
                continue;
            }
            let launcher = self.launchers.remote().clone();
            let (host, bin, seg) = (host.clone(), bin.clone(), segs[0]);
            let bound = bound.clone();
            set.spawn(async move {
                // Never closed, so acquiring only waits.
                let _permit = bound.acquire_owned().await;
                (n, prepare_host(launcher, seg, host, bin, limit).await)
            });
        }
        let mut ok = true;
        while let Some(r) = set.join_next().await {
            match r {
                Ok((n, Ok(path))) => {
                    if let Some(path) = path {
                        for &s in &hosts[n].1 {
                            self.agent_bins.insert(s, path.clone());
                        }
                    }
                }
                Ok((n, Err(error))) => {
                    let host = hosts[n].0.spec.clone();
                    let cause = Cause::Install { host, error };
                    if self.only_sources(&hosts[n].1) {
                        // Those sources alone ([`super::sources`]).
                        self.sources_not_started(&hosts[n].1, cause);
                    } else {
                        ok = false;
                        self.fail(Some(Node::Segment(hosts[n].1[0])), cause);
                    }
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
