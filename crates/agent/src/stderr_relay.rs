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
use std::time::Duration;

/// The most stderr bytes kept while no channel takes them.
pub const KEEP: usize = 256 << 10;

struct State {
    /// The channel's stderr; none while it is lost.
    out: Option<Arc<File>>,
    /// Bumped by each re-attach: a write that fails on a replaced channel
    /// does not mark the new one lost.
    gen: u64,
    /// Bytes no channel took yet.
    kept: VecDeque<u8>,
    /// Bytes dropped from `kept`'s front.
    dropped: u64,
}

impl State {
    fn keep(&mut self, b: &[u8]) {
        self.kept.extend(b);
        let over = self.kept.len().saturating_sub(KEEP);
        if over > 0 {
            self.kept.drain(..over);
            self.dropped += over as u64;
        }
    }

    fn flush_kept(&mut self) {
        let Some(o) = self.out.clone() else {
            return;
        };
        let mut o = &*o;
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

/// Writes `b` to the channel's stderr, outside the lock (a stalled channel
/// blocks only this thread, not a re-attach), or keeps it.
fn relay(state: &Mutex<State>, b: &[u8]) {
    let (out, gen) = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        match (&s.out, s.kept.is_empty()) {
            (Some(o), true) => (o.clone(), s.gen),
            _ => return s.keep(b),
        }
    };
    if (&*out).write_all(b).is_ok() {
        return;
    }
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    if s.gen == gen {
        s.out = None;
        s.keep(b);
    } else {
        // Written (partly) to a replaced channel: the new one gets it.
        s.keep(b);
        s.flush_kept();
    }
}

/// The relay: fd 2 is its pipe from [`StderrRelay::start`] until
/// [`StderrRelay::finish`].
pub struct StderrRelay {
    state: Arc<Mutex<State>>,
    /// Disconnected when the relay thread ends.
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl StderrRelay {
    /// Puts a pipe on fd 2 and relays it to what fd 2 was.
    pub fn start() -> io::Result<StderrRelay> {
        let real: OwnedFd = io::stderr().as_fd().try_clone_to_owned()?;
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        rustix::stdio::dup2_stderr(&w)?;
        drop(w);
        let state = Arc::new(Mutex::new(State {
            out: Some(Arc::new(File::from(real))),
            gen: 0,
            kept: VecDeque::new(),
            dropped: 0,
        }));
        let s = state.clone();
        // Dropped by the thread when it ends: `finish` waits on it.
        let (ended, done) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("stderr".into())
            .spawn(move || {
                let _ended = ended;
                let mut r = File::from(r);
                let mut buf = vec![0u8; 16 << 10];
                loop {
                    match r.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => relay(&s, &buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
            })?;
        Ok(StderrRelay {
            state,
            done: Mutex::new(Some(done)),
        })
    }

    /// A new channel's stderr: what was kept goes there first.
    pub fn reattach(&self, fd: OwnedFd) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.out = Some(Arc::new(File::from(fd)));
        s.gen += 1;
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
                Some(f) => rustix::stdio::dup2_stderr(&**f).map_err(io::Error::from),
                None => File::open("/dev/null")
                    .and_then(|f| rustix::stdio::dup2_stderr(&f).map_err(io::Error::from)),
            };
        }
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(done) = done {
            // Woken as soon as the thread reads the pipe's end.
            let _ = done.recv_timeout(Duration::from_millis(500));
        }
    }
}
