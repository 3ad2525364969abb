//! The SSH side: the `ssh` options every call gets, the data address of a host
//! (`ssh -G`), and the multiplexed master connections that carry the agents'
//! control channels (the `openssh` crate in native-mux mode).
//!
//! Masters are started by rdpipe itself, in the foreground under a guardian
//! ([`rdpipe_agent::guard`]), with `ssh -M -S SOCKET -N`, and then used through
//! [`openssh::Session::resume_mux`]. Starting them ourselves lets every `-o`
//! option through and ties the master's life to rdpipe's.

use openssh::Session;
use rdpipe_plan::RemoteHost;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How rdpipe calls ssh.
#[derive(Debug, Clone, Default)]
pub struct SshConfig {
    /// `-F FILE`.
    pub config_file: Option<PathBuf>,
    /// `-o OPTION`s, passed first so that they win over rdpipe's defaults.
    pub options: Vec<String>,
    /// Seconds for `ConnectTimeout` unless an option sets it.
    pub connect_timeout: u64,
    /// Seconds of a network outage the pipeline's hops survive past their
    /// dead-peer time (`--reconnect-timeout`): the control connections
    /// outlive it too ([`alive_count_max`]).
    pub outage: u64,
}

/// Seconds between two ssh keepalives (`ServerAliveInterval`).
const ALIVE_INTERVAL: u64 = 10;

/// `ServerAliveCountMax` for a pipeline whose hops reconnect for `outage`
/// seconds: 3 unanswered keepalives (30 s, as long as a hop waits for a
/// silent peer before it reconnects) plus one for every 10 s of the
/// reconnect window. An ssh connection that ends takes its agents with it,
/// so with 3 alone a link down for 40 s (a switch rebooting) ended the run
/// through ssh although its hops would have reconnected: in the Soft-RoCE
/// guest, an agent ended without a report 31 s into an outage.
pub fn alive_count_max(outage: u64) -> u64 {
    3 + outage.div_ceil(ALIVE_INTERVAL)
}

/// SSH failures.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// The master connection could not be established.
    #[error("ssh: {0}")]
    Connect(String),
    /// Running ssh or the guardian failed.
    #[error("cannot run ssh: {0}")]
    Spawn(#[source] std::io::Error),
}

impl SshConfig {
    /// Arguments common to every ssh call for `host`, ending with the destination.
    pub fn args(&self, host: &RemoteHost) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(f) = &self.config_file {
            a.push("-F".into());
            a.push(f.to_string_lossy().into_owned());
        }
        for o in &self.options {
            a.push("-o".into());
            a.push(o.clone());
        }
        a.extend(
            [
                "BatchMode=yes".to_string(),
                format!("ConnectTimeout={}", self.connect_timeout.max(1)),
                format!("ServerAliveInterval={ALIVE_INTERVAL}"),
                format!("ServerAliveCountMax={}", alive_count_max(self.outage)),
            ]
            .into_iter()
            .flat_map(|o| ["-o".to_string(), o]),
        );
        if let Some(p) = host.port {
            a.push("-p".into());
            a.push(p.to_string());
        }
        a
    }

    /// The host's address as the ssh configuration resolves it (`ssh -G`'s
    /// `hostname`): what other hosts use to reach its data endpoints unless
    /// `--data-host` says otherwise. Falls back to the name as written.
    pub fn hostname(&self, host: &RemoteHost) -> String {
        let out = std::process::Command::new("ssh")
            .arg("-G")
            .args(self.args(host))
            .arg("--")
            .arg(host.destination())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        if let Ok(o) = out {
            if o.status.success() {
                for l in String::from_utf8_lossy(&o.stdout).lines() {
                    if let Some(h) = l.strip_prefix("hostname ") {
                        return h.trim().to_string();
                    }
                }
            }
        }
        host.name.clone()
    }
}

/// A running master connection.
pub struct Master {
    /// The guard that ends the master with the run (none for a `--persist`
    /// master, which outlives it).
    guard: Option<tokio::process::Child>,
    /// Lines for the guard ([`Master::tell_guard`]); dropping it says
    /// `CLOSE` and closes the guard's stdin.
    guard_lines: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// The session, for opening channels.
    pub session: Arc<Session>,
}

fn last_log_line(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("connection failed")
        .to_string()
}

impl Master {
    /// Starts a master for `host` with its control socket at `ctl` and waits until
    /// it accepts sessions. `guard_exe` is run as `guard_exe --ssh-guard ssh ...`.
    pub async fn launch(
        cfg: &SshConfig,
        host: &RemoteHost,
        ctl: &Path,
        guard_exe: &Path,
    ) -> Result<Master, SshError> {
        let log = ctl.with_extension("log");
        let mut cmd = tokio::process::Command::new(guard_exe);
        cmd.arg("--ssh-guard")
            .arg("--rm")
            .arg(ctl)
            .arg("ssh")
            .args(cfg.args(host))
            .arg("-M")
            .arg("-S")
            .arg(ctl)
            .arg("-N")
            .arg("-E")
            .arg(&log)
            .args(["-o", "ControlPersist=no", "-o", "RemoteCommand=none"])
            .arg("--")
            .arg(host.destination())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // No kill_on_drop: SIGKILL would orphan the master. Dropping the
            // guard's stdin makes it end the master instead.
            .process_group(0);
        let mut guard = cmd.spawn().map_err(SshError::Spawn)?;
        let guard_lines = guard.stdin.take().map(|mut stdin| {
            use tokio::io::AsyncWriteExt;
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            tokio::spawn(async move {
                while let Some(l) = rx.recv().await {
                    let _ = stdin.write_all(format!("{l}\n").as_bytes()).await;
                }
                // An orderly end: the guard skips the farewells.
                let _ = stdin.write_all(b"CLOSE\n").await;
            });
            tx
        });
        let session = Arc::new(Session::resume_mux(ctl.into(), Some(log.clone().into())));
        let limit = Duration::from_secs(cfg.connect_timeout.max(1) + 30);
        let start = Instant::now();
        // ssh creates the control socket once it has logged in: look for it
        // often (a stat every 5 ms), ask the master itself only once it is
        // there. A backoff to 100 ms here cost up to 90 ms of every run's
        // start-up (a master is up after about 0.2 s).
        let pause = Duration::from_millis(5);
        loop {
            if let Ok(Some(_)) = guard.try_wait() {
                return Err(SshError::Connect(last_log_line(&log)));
            }
            if ctl.exists() && session.check().await.is_ok() {
                return Ok(Master {
                    guard: Some(guard),
                    guard_lines,
                    session,
                });
            }
            if start.elapsed() > limit {
                // Closing the guard's stdin (on return) ends the master.
                return Err(SshError::Connect(format!(
                    "no master connection after {} s ({})",
                    limit.as_secs(),
                    last_log_line(&log)
                )));
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// A master that outlives the run (`--persist`, [`crate::persist`]):
    /// the one answering at `ctl` if there is one, else a new one that ssh
    /// puts in the background once logged in (`-f`) and that ends by itself
    /// `keep` after its last session. Returns whether it was reused.
    pub async fn persistent(
        cfg: &SshConfig,
        host: &RemoteHost,
        ctl: &Path,
        keep: Duration,
    ) -> Result<(Master, bool), SshError> {
        let log = ctl.with_extension("log");
        let session = Arc::new(Session::resume_mux(ctl.into(), Some(log.clone().into())));
        let kept = |session| Master {
            guard: None,
            guard_lines: None,
            session,
        };
        if ctl.exists() && session.check().await.is_ok() {
            return Ok((kept(session), true));
        }
        // A socket left by a master that is gone.
        let _ = std::fs::remove_file(ctl);
        let limit = Duration::from_secs(cfg.connect_timeout.max(1) + 30);
        let start = tokio::process::Command::new("ssh")
            .args(cfg.args(host))
            .arg("-M")
            .arg("-S")
            .arg(ctl)
            .args(["-N", "-f", "-E"])
            .arg(&log)
            .args(["-o", &format!("ControlPersist={}", keep.as_secs().max(1))])
            .args(["-o", "RemoteCommand=none"])
            .arg("--")
            .arg(host.destination())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // With -f, ssh returns once it has logged in and gone to the background.
        match tokio::time::timeout(limit, start).await {
            Ok(Ok(st)) if st.success() => {}
            Ok(Ok(_)) => return Err(SshError::Connect(last_log_line(&log))),
            Ok(Err(e)) => return Err(SshError::Spawn(e)),
            Err(_) => {
                return Err(SshError::Connect(format!(
                    "no master connection after {} s",
                    limit.as_secs()
                )))
            }
        }
        for _ in 0..400 {
            if ctl.exists() && session.check().await.is_ok() {
                return Ok((kept(session), false));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Err(SshError::Connect(last_log_line(&log)))
    }

    /// Hands the guard a line (`FAREWELL ...`, [`rdpipe_agent::guard`]).
    pub fn tell_guard(&self, line: String) {
        if let Some(tx) = &self.guard_lines {
            let _ = tx.send(line);
        }
    }

    /// Ends the master (and with it every channel still open) and waits for
    /// it; a `--persist` master is left running, its sessions closed.
    pub async fn close(mut self) {
        self.guard_lines.take();
        let Some(mut guard) = self.guard.take() else {
            return;
        };
        if tokio::time::timeout(Duration::from_secs(4), guard.wait())
            .await
            .is_err()
        {
            let _ = guard.start_kill();
            let _ = guard.wait().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_connections_outlive_the_hops_reconnect_window() {
        assert_eq!(alive_count_max(0), 3, "--reconnect-timeout 0: 30 s");
        assert_eq!(alive_count_max(5), 4);
        assert_eq!(alive_count_max(60), 9, "the default: 90 s");
        for outage in [0, 1, 5, 9, 10, 11, 59, 60, 61, 600] {
            assert!(ALIVE_INTERVAL * alive_count_max(outage) >= 30 + outage);
        }
        let host = RemoteHost {
            spec: "h".into(),
            user: None,
            name: "h".into(),
            port: None,
        };
        let args = SshConfig {
            outage: 60,
            ..SshConfig::default()
        }
        .args(&host);
        let at = args
            .iter()
            .position(|a| a == "ServerAliveCountMax=9")
            .expect("the keepalive count is passed");
        assert_eq!(args[at - 1], "-o");
        assert!(args.contains(&"ServerAliveInterval=10".to_string()));
    }
}
