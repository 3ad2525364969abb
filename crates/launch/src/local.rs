//! Local segments: the agent is this executable (`rdpipe --agent ...`), a
//! child process in a process group of its own, its stdin and stdout piped
//! as a remote agent's are.

use crate::launcher::{
    AgentHandle, AgentStart, Boxed, LaunchCause, LaunchError, Launcher, LauncherKind, Reader,
    ShellOutput, Spawned, WaitFuture,
};
use rdpipe_plan::{Host, RemoteHost};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

/// Starts agents on this host.
pub struct LocalLauncher {
    /// This executable, which is also the agent.
    pub exe: PathBuf,
}

/// The handle of a local process (an agent, or the `srun` of one) whose stdin
/// and stdout are piped (its stderr too, unless inherited).
pub fn local_handle(mut ch: tokio::process::Child) -> AgentHandle {
    let stdin = Box::new(ch.stdin.take().expect("piped"));
    let stdout = Box::new(ch.stdout.take().expect("piped"));
    let stderr = ch.stderr.take().map(|e| Box::new(e) as Reader);
    let pid = ch.id();
    let wait: WaitFuture = Box::pin(async move {
        match ch.wait().await {
            Ok(s) => (s.code(), rdpipe_agent::command::describe_exit(s)),
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

impl Launcher for LocalLauncher {
    fn kind(&self) -> LauncherKind {
        LauncherKind::Local
    }

    fn describe_host(&self, _host: &Host) -> String {
        "local, no ssh".to_string()
    }

    fn describe_hosts(&self, _hosts: &[(RemoteHost, Vec<usize>)]) -> String {
        String::new()
    }

    fn data_address(&self, host: &RemoteHost) -> String {
        host.name.clone()
    }

    fn address_origin(&self) -> &'static str {
        "loopback"
    }

    fn prepare<'a>(
        &'a self,
        _hosts: &'a [(RemoteHost, Vec<usize>)],
    ) -> Boxed<'a, Result<(), Vec<LaunchError>>> {
        Box::pin(async { Ok(()) })
    }

    fn shell(
        &self,
        seg: usize,
        _host: &RemoteHost,
        line: String,
        input: Option<Arc<Vec<u8>>>,
    ) -> Boxed<'static, Result<ShellOutput, LaunchError>> {
        Box::pin(async move {
            let fail = |m: String| {
                LaunchError::new(LauncherKind::Local, None, LaunchCause::Shell(m)).at(seg)
            };
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c")
                .arg(line)
                .stdin(if input.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut ch = c.spawn().map_err(|e| fail(format!("cannot run sh: {e}")))?;
            crate::install::feed(input, ch.stdin.take()).await;
            ch.wait_with_output()
                .await
                .map(ShellOutput::of)
                .map_err(|e| fail(format!("sh failed: {e}")))
        })
    }

    fn spawn_agent(&self, start: AgentStart) -> Boxed<'static, Result<Spawned, LaunchError>> {
        let exe = self.exe.clone();
        Box::pin(async move {
            let mut c = tokio::process::Command::new(&exe);
            // With a progress line, the local command's stderr goes through the
            // same line writer as remote stderr (which clears the line first);
            // otherwise it is inherited untouched.
            c.args(crate::launcher::agent_argv(&start.settings))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(if start.pipe_stderr {
                    Stdio::piped()
                } else {
                    Stdio::inherit()
                })
                .process_group(0)
                .kill_on_drop(true);
            let ch = c.spawn().map_err(|e| {
                LaunchError::new(
                    LauncherKind::Local,
                    None,
                    LaunchCause::Start(format!(
                        "cannot run the local agent {}: {e}",
                        exe.display()
                    )),
                )
                .at(start.seg)
            })?;
            Ok(Spawned::Ready {
                handle: local_handle(ch),
                ran: None,
                sealer: None,
            })
        })
    }

    fn close(&self) -> Boxed<'_, ()> {
        Box::pin(async {})
    }
}
