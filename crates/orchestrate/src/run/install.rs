//! The run's side of self-install ([`rdpipe_launch::install`]): every remote
//! agent starts on the fast path ([`rdpipe_launch::install::start`]), its
//! session running the agent the host already has once the host checked it.
//! A host without one answers the probe in that session instead; then, once
//! per host and bounded in time, rdpipe picks the `rdrecv` in PATH, the
//! cached copy or an upload, and starts the agent again. Skipped with
//! `--no-install` or `--remote-bin`: then agents start as `rdrecv` from PATH
//! or `DIR/rdrecv`.

use super::verdict::Cause;
use super::Runner;
use rdpipe_launch::install::{after_probe, default_bin, AgentBinary, InstallError};
use rdpipe_launch::{
    AgentProgram, AgentStart, LaunchError, Launcher, Spawned, MAX_PARALLEL_STARTS,
};
use rdpipe_plan::Host;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OnceCell, Semaphore};
use tracing::debug;

/// Reading this executable and hashing it (for the cache entry's name), on a
/// blocking thread while the hosts are being readied.
pub(super) type BinaryRead = tokio::task::JoinHandle<std::io::Result<AgentBinary>>;

/// What one host's probe answer decided: the binary to run (None: `rdrecv`
/// from PATH), or why there is none.
type Decision = Result<Option<String>, InstallError>;

/// Self-install for this run: the binary, and each host's decision once a
/// fast path fell back to the probe.
pub(super) struct Install {
    bin: Arc<AgentBinary>,
    limit: Duration,
    decided: HashMap<String, Arc<OnceCell<Decision>>>,
    /// How many hosts install at once.
    bound: Arc<Semaphore>,
}

/// Why an agent did not start.
pub(super) enum StartFailure {
    /// Its launcher could not start it.
    Launch(LaunchError),
    /// Its host cannot have the agent.
    Install(InstallError),
}

/// One agent's start on the fast path, with what its fallback needs.
pub(super) struct Checked {
    bin: Arc<AgentBinary>,
    decided: Arc<OnceCell<Decision>>,
    bound: Arc<Semaphore>,
}

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

    /// Waits for the binary `read` reads; false when it cannot be read
    /// (reported).
    pub(super) async fn ready_install(&mut self, read: Option<BinaryRead>) -> bool {
        let Some(read) = read else {
            return true;
        };
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
        let decided = self
            .plan
            .remote_hosts()
            .into_iter()
            .map(|(h, _)| (h.spec, Arc::new(OnceCell::new())))
            .collect();
        self.install = Some(Install {
            bin,
            limit: Duration::from_secs(self.config.connect_timeout.max(30)),
            decided,
            bound: Arc::new(Semaphore::new(MAX_PARALLEL_STARTS)),
        });
        true
    }

    /// What segment `i`'s agent runs on `host`, and what its fast path
    /// needs.
    pub(super) fn program_of(&self, host: &Host) -> (AgentProgram, Option<Checked>) {
        let Host::Remote(r) = host else {
            return (AgentProgram::Bin(self.exe.exe.display().to_string()), None);
        };
        match &self.install {
            Some(x) => (
                AgentProgram::Checked {
                    entry: x.bin.entry.clone(),
                    sha256: x.bin.sha256.clone(),
                    limit: x.limit,
                },
                Some(Checked {
                    bin: x.bin.clone(),
                    decided: x.decided.get(&r.spec).cloned().unwrap_or_default(),
                    bound: x.bound.clone(),
                }),
            ),
            None => (
                AgentProgram::Bin(default_bin(self.config.remote_bin.as_deref())),
                None,
            ),
        }
    }
}

/// Starts one agent through `launcher`; when its host answers the probe
/// instead, decides (once per host: the first answer decides for every
/// segment there), installs where needed and starts it again.
pub(super) async fn start_agent(
    launcher: Arc<dyn Launcher>,
    mut start: AgentStart,
    checked: Option<Checked>,
) -> Result<Spawned, StartFailure> {
    let t = std::time::Instant::now();
    let first = launcher
        .spawn_agent(start.clone())
        .await
        .map_err(StartFailure::Launch)?;
    let (Spawned::Probed(out), Some(c), Host::Remote(host), AgentProgram::Checked { limit, .. }) =
        (&first, &checked, &start.host, &start.program)
    else {
        if let (Spawned::Ready { ran: Some(bin), .. }, Some(_), Host::Remote(host)) =
            (&first, &checked, &start.host)
        {
            match bin.rsplit_once('/') {
                Some((dir, _)) => debug!("{}: using the cached agent in {dir}", host.spec),
                None => debug!("{}: using the {bin} in PATH", host.spec),
            }
        }
        return Ok(first);
    };
    debug!(
        "{}: probed in {} ms (no agent it could run at once)",
        host.spec,
        t.elapsed().as_millis()
    );
    let limit = *limit;
    let decision = c
        .decided
        .get_or_init(|| async {
            // Never closed, so acquiring only waits.
            let _permit = c.bound.acquire().await;
            after_probe(&*launcher, start.seg, host, &c.bin, out, limit).await
        })
        .await
        .clone()
        .map_err(StartFailure::Install)?;
    start.program = AgentProgram::Bin(decision.unwrap_or_else(|| default_bin(None)));
    launcher
        .spawn_agent(start)
        .await
        .map_err(StartFailure::Launch)
}
