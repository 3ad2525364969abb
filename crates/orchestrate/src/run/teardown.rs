//! Ending a pipeline: the signals that stop it (SIGINT, SIGTERM, SIGHUP), closing
//! every agent's control channel (agents kill their commands' process groups and
//! exit at once), then SIGTERM and SIGKILL for local agents still there, and
//! closing the launchers (ssh masters, leftover srun steps). Runs after
//! success too: nothing is left running.

use super::Runner;
use rustix::process::{kill_process, Pid, Signal};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tracing::debug;

/// SIGINT, SIGTERM and SIGHUP as one stream of signal numbers (less those
/// inherited as ignored: see `guard::stop_signals`).
///
/// Caught with signal-hook's iterator on a thread of its own, not tokio's
/// `signal()`: tokio installs the handler before it subscribes the stream, and
/// a signal its driver broadcasts in between has no listener and is dropped,
/// the default action already replaced. A SIGINT in rdpipe's first
/// milliseconds was lost that way on a loaded machine, and `yes | cat` ran on.
/// signal-hook records each signal from the moment its handler is installed.
pub struct Signals {
    rx: mpsc::UnboundedReceiver<i32>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}

impl Signals {
    /// Catches the three signals (when they cannot be caught, their default
    /// action stops rdpipe instead).
    pub fn new() -> Signals {
        let (tx, rx) = mpsc::unbounded_channel();
        rdpipe_agent::guard::on_stop_signals(move |s| tx.send(s).is_ok());
        Signals { rx }
    }

    /// The next signal's number.
    pub async fn next(&mut self) -> i32 {
        match self.rx.recv().await {
            Some(s) => s,
            None => std::future::pending().await,
        }
    }
}

impl Runner {
    /// Closes every agent's control channel: from now on, agents that end are
    /// collateral.
    pub(super) fn close_channels(&mut self) {
        debug!("closing the agents' control channels");
        self.closing = true;
        for i in 0..self.agents.len() {
            self.dismiss(i);
            self.give_up_reattach(i);
        }
    }

    /// The whole teardown (see the module doc).
    pub(super) async fn teardown(&mut self) {
        debug!("teardown: closing the agents' control channels");
        self.close_channels();
        // (The `BYE`s are written by tasks of their own.)
        tokio::task::yield_now().await;
        self.kill_local_agents().await;
        self.launchers.remote().close().await;
        self.launchers.of(&rdpipe_plan::Host::Local).close().await;
        debug!("teardown done");
    }

    /// Handles events until every agent exited or `limit` passed.
    async fn drain_for(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline && !self.agents_done() {
            tokio::select! {
                m = self.events.rx.recv() => match m { Some(m) => self.handle(m).await, None => break },
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
    }

    fn signal_local_agents(&self, sig: Signal) {
        for (i, pid) in self.agents.iter().map(|a| &a.pid).enumerate() {
            if let (Some(pid), false) = (pid, self.segs[i].exited) {
                if let Some(p) = Pid::from_raw(*pid as i32) {
                    debug!("teardown: {sig:?} to local agent [{}] (pid {pid})", i + 1);
                    let _ = kill_process(p, sig);
                }
            }
        }
    }

    async fn kill_local_agents(&mut self) {
        // Local agents exit on their own when their stdin closes; give them a
        // moment, then SIGTERM (they still clean up), then SIGKILL.
        self.drain_for(Duration::from_millis(1500)).await;
        self.signal_local_agents(Signal::Term);
        self.drain_for(Duration::from_millis(1000)).await;
        self.signal_local_agents(Signal::Kill);
    }
}
