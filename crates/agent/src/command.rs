//! The segment's shell command: started under its guardian (which leads the
//! command's process group and takes it down when the agent dies, even by
//! SIGKILL, through the lifeline pipe), its stdout as the sender's input
//! ([`CmdOutput`], which turns a failed command into an input error), and its
//! stdin held apart from the receiver ([`HeldInput`], closed only once the
//! incoming stream was verified whole).

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// `exited with status N` / `was killed by signal N`.
pub fn describe_exit(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => "ended".to_string(),
    }
}

/// What the segment's threads share about the command.
#[derive(Default)]
pub struct Shared {
    /// The outgoing stream must not end cleanly.
    pub poisoned: AtomicBool,
    /// The command is being stopped: do not wait for its exit.
    pub stopping: AtomicBool,
    /// The sender let go of the command's stdout (set just before the pipe's read
    /// end closes): from then on a SIGPIPE death of the command is the sender's
    /// failure showing through, not the command's own.
    pub output_closed: AtomicBool,
    /// The command's stdout reached end of file (the command closed it or
    /// ended) before the sender let go of it.
    pub output_ended: AtomicBool,
    /// The command's exit status, once it exited.
    status: Mutex<Option<ExitStatus>>,
    cv: Condvar,
    /// Variables the command gets besides the agent's environment (a
    /// `--from` source's `RDPIPE_SOURCE` and `RDPIPE_SOURCE_INDEX`).
    pub env: Vec<(String, String)>,
}

impl Shared {
    /// Records the command's exit and wakes whoever waits for it.
    pub fn set_exit(&self, st: ExitStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(st);
        self.cv.notify_all();
    }

    /// Whether the sender let go of the command's stdout before it ended (a
    /// failure downstream): a command that stops reading its input after that
    /// was most likely killed by SIGPIPE (or by the agent stopping it), not
    /// stopping of its own accord.
    pub fn output_cut(&self) -> bool {
        self.output_closed.load(Ordering::SeqCst) && !self.output_ended.load(Ordering::SeqCst)
    }

    /// Whether the command has exited.
    pub fn exited(&self) -> bool {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Poisons the outgoing stream; with `stop`, the command is being stopped too.
    pub fn poison(&self, stop: bool) {
        self.poisoned.store(true, Ordering::SeqCst);
        if stop {
            self.stopping.store(true, Ordering::SeqCst);
        }
        self.cv.notify_all();
    }

    /// Waits for the command's exit unless it is being stopped.
    fn wait_exit(&self) -> Option<ExitStatus> {
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        while st.is_none() && !self.stopping.load(Ordering::SeqCst) {
            st = self
                .cv
                .wait_timeout(st, Duration::from_millis(200))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *st
    }
}

/// Why the command's output did not end cleanly: carried inside the sender's
/// input error, so the segment can tell an echo from a failure of its own.
#[derive(Debug)]
pub enum CmdEnd {
    /// The command itself failed.
    Failed(ExitStatus),
    /// The pipeline failed elsewhere and the agent stopped the command.
    Poisoned,
}

impl fmt::Display for CmdEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdEnd::Failed(s) => write!(f, "the command {}", describe_exit(*s)),
            CmdEnd::Poisoned => f.write_str("the pipeline failed"),
        }
    }
}

impl std::error::Error for CmdEnd {}

impl CmdEnd {
    /// Whether `e` (a sender's input error) is the poisoned end of the output.
    pub fn is_poisoned(e: &io::Error) -> bool {
        matches!(
            e.get_ref().and_then(|i| i.downcast_ref::<CmdEnd>()),
            Some(CmdEnd::Poisoned)
        )
    }
}

/// The command's stdout, as the sender's input: at end of file it waits for the
/// command's exit and turns a failure (or a poisoned pipeline) into an input error,
/// so the receiver is told of an abort instead of a clean end.
pub struct CmdOutput {
    inner: ChildStdout,
    shared: Arc<Shared>,
}

impl Read for CmdOutput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            return Ok(n);
        }
        self.shared.output_ended.store(true, Ordering::SeqCst);
        let st = self.shared.wait_exit();
        // Poisoned first: a command stopped by the agent after another failure is
        // an echo of that failure, not a failure of its own to report downstream.
        let poisoned = self.shared.poisoned.load(Ordering::SeqCst);
        match st {
            Some(s) if !s.success() && !poisoned => Err(io::Error::other(CmdEnd::Failed(s))),
            Some(_) if !poisoned => Ok(0),
            _ => Err(io::Error::other(CmdEnd::Poisoned)),
        }
    }
}

impl Drop for CmdOutput {
    fn drop(&mut self) {
        // Runs before `inner` (the pipe's read end) is closed.
        self.shared.output_closed.store(true, Ordering::SeqCst);
    }
}

/// Its stdout is a pipe: the window links the pipe's pages ([`rdpipe_transport::replay`]).
impl rdpipe_transport::replay::Input for CmdOutput {}

impl AsFd for CmdOutput {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

/// The command's stdin, held apart from the receiver: the receiver closes it
/// (end of file for the command) only after the stream was verified whole. After
/// a failure the agent first stops the command, then closes it, so a command never
/// mistakes a truncated stream for a complete one.
#[derive(Clone)]
pub struct HeldInput(Arc<Mutex<Option<std::process::ChildStdin>>>);

impl HeldInput {
    /// Closes the command's stdin.
    pub fn release(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Write for HeldInput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(w) => w.write(buf),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// A started command.
pub struct Started {
    /// The guardian (or the shell when the guardian could not be set up).
    pub child: Child,
    /// Its stdin, when the segment has an incoming stream.
    pub input: Option<HeldInput>,
    /// Its stdout, when the segment has an outgoing stream.
    pub output: Option<CmdOutput>,
}

/// Starts `SHELL -c cmd` (the user's login shell, [`super::shell`]) in a
/// process group of its own under the guardian, with
/// its stdin piped when `with_input` and its stdout piped when `with_output`
/// (else `/dev/null`).
pub fn start(
    cmd: &str,
    with_input: bool,
    with_output: bool,
    shared: &Arc<Shared>,
) -> io::Result<Started> {
    let stdout = if with_output {
        Stdio::piped()
    } else {
        Stdio::null()
    };
    start_with(cmd, with_input, stdout, shared)
}

/// The `SHLVL` the command's shell gets, when it must differ from ours.
///
/// On a remote host the login shell sshd started has read its start-up files
/// (bash: `~/.bashrc`, for a shell run by sshd) and `exec`ed the agent, and
/// bash lowers `SHLVL` to 0 on that `exec`. At 0 the command's `bash -c` would
/// count as run by sshd again and read `~/.bashrc` a second time, in series
/// with the stream (with a pyenv or conda set-up, about 0.1 s per segment).
/// At 1 it does not: the command gets the environment the first pass
/// exported, as `ssh HOST CMD`'s command does; only functions and unexported
/// variables of `~/.bashrc` do not reach it.
fn shell_level(ours: Option<&str>) -> Option<&'static str> {
    match ours.map(|v| v.trim().parse::<i64>()) {
        Some(Ok(n)) if n >= 1 => None,
        _ => Some("1"),
    }
}

/// The command's stdout as the agent's stderr, which rdpipe shows prefixed
/// with the host (the agent's stdout is the control channel): for a command
/// whose output goes nowhere else (a `--to` sink's, an `--each` instance's
/// last).
pub fn stdout_to_stderr() -> Stdio {
    io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null())
}

/// [`start`] with the command's stdout given: a `--to` sink's command writes
/// to the agent's stderr (rdpipe shows it prefixed with the host).
pub fn start_with(
    cmd: &str,
    with_input: bool,
    stdout: Stdio,
    shared: &Arc<Shared>,
) -> io::Result<Started> {
    // The guardian gets the read end of the lifeline; the agent keeps the write
    // end for its whole life, so the guardian sees end of file when it dies.
    let lifeline = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).and_then(|(r, w)| {
        rustix::io::fcntl_setfd(&r, rustix::io::FdFlags::empty())?;
        Ok((r, w))
    });
    let shell = super::shell::login_shell();
    let mut c = match &lifeline {
        Ok((r, _)) => {
            // This very binary, even when its file was replaced since it
            // started (another host sharing this HOME installed the same
            // build into the same cache entry: a new file, and the path
            // `current_exe` gives is then `… (deleted)`).
            let mut c = Command::new("/proc/self/exe");
            c.arg0(
                std::env::current_exe()
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_os_string()))
                    .unwrap_or_else(|| "rdrecv".into()),
            );
            c.arg("--cmd-guard")
                .arg(std::os::fd::AsRawFd::as_raw_fd(r).to_string())
                .arg(&shell);
            c
        }
        _ => Command::new(&shell),
    };
    c.arg("-c").arg(cmd).process_group(0);
    c.envs(shared.env.iter().map(|(k, v)| (k, v)));
    if let Some(level) = shell_level(std::env::var("SHLVL").ok().as_deref()) {
        c.env("SHLVL", level);
    }
    c.stdin(if with_input {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    c.stdout(stdout);
    let mut child = c.spawn()?;
    tracing::debug!(
        "command started (pid {}, {}): {cmd}",
        child.id(),
        shell.display()
    );
    let input = child.stdin.take().map(|cin| {
        // One write per received buffer into the command, not one per 64 KiB.
        rdpipe_transport::pump::grow_pipe(&cin);
        HeldInput(Arc::new(Mutex::new(Some(cin))))
    });
    let output = child.stdout.take().map(|inner| CmdOutput {
        inner,
        shared: shared.clone(),
    });
    if let Ok((r, w)) = lifeline {
        drop(r);
        std::mem::forget(w);
    }
    Ok(Started {
        child,
        input,
        output,
    })
}

#[cfg(test)]
mod tests {
    use super::shell_level;

    #[test]
    fn the_command_shell_counts_as_nested() {
        assert_eq!(shell_level(None), Some("1"));
        assert_eq!(shell_level(Some("0")), Some("1"));
        assert_eq!(shell_level(Some("garbage")), Some("1"));
        assert_eq!(shell_level(Some("1")), None);
        assert_eq!(shell_level(Some("3")), None);
    }
}
