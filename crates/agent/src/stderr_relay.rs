//! With `--reattach`, the agent's stderr (fd 2: its own messages, and its
//! command's stderr, which inherits it) is a pipe that a thread relays to the
//! control channel's stderr. A command that writes to stderr while the ssh
//! session is gone then neither dies of SIGPIPE nor blocks: what it writes
//! meanwhile is kept (the last [`KEEP`] bytes) and reaches rdpipe after the
//! re-attach, on the new session's stderr.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most stderr bytes kept while no channel takes them.
pub const KEEP: usize = 256 << 10;

struct State {
    /// The channel's stderr; none while it is lost.
    out: Option<File>,
    /// Bytes no channel took yet.
    kept: VecDeque<u8>,
    /// Bytes dropped from `kept`'s front.
    dropped: u64,
}

impl State {
    fn write(&mut self, b: &[u8]) {
        if self.kept.is_empty() {
            if let Some(o) = self.out.as_mut() {
                if o.write_all(b).is_ok() {
                    return;
                }
                self.out = None;
            }
        }
        self.kept.extend(b);
        let over = self.kept.len().saturating_sub(KEEP);
        if over > 0 {
            self.kept.drain(..over);
            self.dropped += over as u64;
        }
    }

    fn flush_kept(&mut self) {
        let Some(o) = self.out.as_mut() else {
            return;
        };
        if self.dropped > 0 {
            let note = format!(
                "[{} bytes of stderr dropped while detached]\n",
                self.dropped
            );
            let _ = o.write_all(note.as_bytes());
            self.dropped = 0;
        }
        let (a, b) = self.kept.as_slices();
        if o.write_all(a).and_then(|_| o.write_all(b)).is_ok() {
            self.kept.clear();
        } else {
            self.out = None;
        }
    }
}

/// The relay: fd 2 is its pipe from [`StderrRelay::start`] until
/// [`StderrRelay::finish`].
pub struct StderrRelay {
    state: Arc<Mutex<State>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl StderrRelay {
    /// Puts a pipe on fd 2 and relays it to what fd 2 was.
    pub fn start() -> io::Result<StderrRelay> {
        let real: OwnedFd = io::stderr().as_fd().try_clone_to_owned()?;
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        rustix::stdio::dup2_stderr(&w)?;
        drop(w);
        let state = Arc::new(Mutex::new(State {
            out: Some(File::from(real)),
            kept: VecDeque::new(),
            dropped: 0,
        }));
        let s = state.clone();
        let thread = std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                let mut r = File::from(r);
                let mut buf = vec![0u8; 16 << 10];
                loop {
                    match r.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => s.lock().unwrap_or_else(|p| p.into_inner()).write(&buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })?;
        Ok(StderrRelay {
            state,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A new channel's stderr: what was kept goes there first.
    pub fn reattach(&self, fd: OwnedFd) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.out = Some(File::from(fd));
        s.flush_kept();
    }

    /// Puts the channel's stderr back on fd 2 and relays what is still in
    /// the pipe (bounded: a background process of the command may hold the
    /// pipe open).
    pub fn finish(&self) {
        {
            let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            // (Failing that, fd 2 stays the pipe, which is read below.)
            let _ = match &s.out {
                Some(f) => rustix::stdio::dup2_stderr(f).map_err(io::Error::from),
                None => File::open("/dev/null")
                    .and_then(|f| rustix::stdio::dup2_stderr(&f).map_err(io::Error::from)),
            };
        }
        let t = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            let deadline = std::time::Instant::now() + Duration::from_millis(500);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}
