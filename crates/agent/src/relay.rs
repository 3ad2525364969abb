//! A `--to` sink of a fan-out (chain relay): the incoming stream is teed into
//! the sink's local part (its command's stdin, or a `> FILE`) and, when the sink
//! is not the last of the chain, into a pipe read by the outgoing transfer, which
//! sends the same bytes to the next sink. The local part and the relay are
//! independent: a command that fails or stops reading (or a file that cannot be
//! written) is reported (`FAIL cmd` / `FAIL file`, the command's `EXIT`) while
//! the stream still arrives whole, verified, and goes on to the next host.
//!
//! The relay's outgoing stream ends cleanly only once the incoming one was
//! verified (the receiver's flush): a failed or tampered incoming stream closes
//! the relay pipe unverified, and the outgoing transfer turns that into an abort
//! ([`CmdEnd::Poisoned`]), so no sink downstream ever takes a partial stream for a
//! whole one.
//!
//! A relay that breaks (the next sink or its host died: the outgoing transfer
//! fails and says so) is dropped; the sink's own copy goes on.
//!
//! The tee writes each received buffer into the local part, then into the relay
//! pipe, both blocking: the chain runs at the speed of its slowest sink.
//! Between two RDMA connections on one device there is no relay pipe: the
//! transport forwards from its receive ring ([`rdpipe_transport::relay`]) and
//! the tee writes only the local part
//! ([`rdpipe_transport::relay::RelayOutput::forwarding`]).

use super::command::{self, CmdEnd, HeldInput, Shared};
use super::home::expand_home;
use super::segment::{Ev, Segment};
use super::transfers::Transfers;
use super::AgentArgs;
use rdpipe_control::{Direction, Part};
use rdpipe_transport::output::{Mode, OutputFile};
use rdpipe_transport::relay::RelayOutput as TeeOutput;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

/// The relay pipe's read end: the outgoing transfer's input.
pub struct RelayInput {
    pipe: File,
    verified: Arc<AtomicBool>,
}

impl Read for RelayInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.pipe.read(buf)?;
        if n > 0 || buf.is_empty() || self.verified.load(Ordering::SeqCst) {
            Ok(n)
        } else {
            // The incoming stream did not verify: abort downstream.
            Err(io::Error::other(CmdEnd::Poisoned))
        }
    }
}

/// A pipe: the window links the pipe's pages ([`rdpipe_transport::replay`]).
impl rdpipe_transport::replay::Input for RelayInput {}

impl AsFd for RelayInput {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.pipe.as_fd()
    }
}

/// The relay pipe's write end, closed (verified) by [`Tee::flush`] (or, as
/// a merge's input, by its own flush).
pub(crate) struct RelayOutput {
    pipe: File,
    verified: Arc<AtomicBool>,
}

/// As a merge's input ([`crate::gather`]): flushing it marks the stream
/// verified; dropping it then ends the outgoing stream cleanly.
impl Write for RelayOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pipe.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.verified.store(true, Ordering::SeqCst);
        Ok(())
    }
}

/// The relay pipe (close-on-exec: the sink's command must not hold its ends).
pub(crate) fn relay_pipe() -> io::Result<(RelayInput, RelayOutput)> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    rdpipe_transport::pump::grow_pipe(&w);
    let verified = Arc::new(AtomicBool::new(false));
    Ok((
        RelayInput {
            pipe: File::from(r),
            verified: verified.clone(),
        },
        RelayOutput {
            pipe: File::from(w),
            verified,
        },
    ))
}

/// What the sink does with the stream on its own host.
enum Local {
    /// Its command's stdin.
    Cmd(HeldInput),
    /// `> FILE` / `>> FILE`, opened once the sender authenticated.
    File(String, Mode),
    /// Nothing (the command could not start; reported).
    Nothing,
}

/// The receiver's output on a sink: the local part and the relay.
struct Tee {
    local: Option<Box<dyn Write + Send>>,
    /// `FILE` for a `> FILE` sink (messages), `None` for a command.
    file: Option<String>,
    relay: Option<RelayOutput>,
    /// Bytes of the stream taken so far.
    bytes: u64,
    tx: mpsc::Sender<Ev>,
}

impl Tee {
    fn local_failed(&mut self, e: io::Error) {
        self.local = None;
        let ev = match &self.file {
            Some(path) => Ev::Local(Part::File, format!("{path}: {e}")),
            None if e.kind() == io::ErrorKind::BrokenPipe => Ev::Cut(self.bytes),
            None => Ev::Local(Part::Cmd, format!("writing to the command failed: {e}")),
        };
        let _ = self.tx.send(ev);
    }
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(l) = self.local.as_mut() {
            if let Err(e) = l.write_all(buf) {
                self.local_failed(e);
            }
        }
        if let Some(r) = self.relay.as_mut() {
            if r.pipe.write_all(buf).is_err() {
                // The outgoing transfer ended (the next sink died; it reports
                // that itself): the local part goes on without the relay.
                self.relay = None;
            }
        }
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }

    /// Called once the incoming stream verified: publishes a `> FILE`, and ends
    /// the relayed stream cleanly. A local failure does not fail the stream.
    fn flush(&mut self) -> io::Result<()> {
        if let Some(mut l) = self.local.take() {
            if let Err(e) = l.flush() {
                self.local_failed(e);
            }
        }
        if let Some(r) = self.relay.take() {
            r.verified.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

impl TeeOutput for Tee {
    fn forwarding(&mut self) {
        self.relay = None;
    }

    /// The local part goes on (see the module docs).
    fn forward_broke(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn unverified(&self) -> io::Error {
        io::Error::other(CmdEnd::Poisoned)
    }
}

/// Starts a sink: the command (or file), the relay to the next sink when there
/// is one, and the incoming transfer into the tee.
pub fn start_sink(a: &AgentArgs, seg: &mut Segment, t: &mut Transfers, shared: &Arc<Shared>) {
    seg.sink = true;
    let tx = t.tx.clone();
    let (mut relay_input, relay) = if seg.pending(Direction::Out) {
        match relay_pipe() {
            Ok((input, output)) => (Some(input), Some(output)),
            Err(e) => {
                seg.drop_transfer(Direction::Out);
                seg.setup_failed(Part::Agent, format!("cannot create the relay pipe: {e}"));
                (None, None)
            }
        }
    } else {
        (None, None)
    };
    let mut file = None;
    let local = if let Some(cmd) = &a.cmd {
        let stdout = command::stdout_to_stderr();
        match command::start_with(cmd, true, stdout, shared) {
            Ok(started) => {
                seg.command_started(started.child);
                match started.input {
                    Some(held) => {
                        seg.held_input = Some(held.clone());
                        Local::Cmd(held)
                    }
                    None => Local::Nothing,
                }
            }
            Err(e) => {
                let _ = tx.send(Ev::Local(Part::Cmd, format!("cannot start the shell: {e}")));
                Local::Nothing
            }
        }
    } else if let Some(path) = a.write.as_ref().or(a.append.as_ref()) {
        // Not the segment's `file_target`: the tee reports the file's failures
        // itself, and a failure of the incoming stream is the transfer's.
        let path = expand_home(path, std::env::var_os("HOME").as_deref());
        file = Some(path.clone());
        let mode = if a.append.is_some() {
            Mode::Append
        } else {
            Mode::Replace
        };
        Local::File(path, mode)
    } else {
        Local::Nothing
    };
    if !seg.pending(Direction::In) {
        if let Some(input) = relay_input.take() {
            t.spawn_send(input);
        }
        return;
    }
    let held = seg.held_input.clone();
    let direct = a.direct;
    t.spawn_recv_relaying(
        relay_input,
        Box::new(move || {
            let local: Option<Box<dyn Write + Send>> = match local {
                Local::Cmd(h) => Some(Box::new(h)),
                Local::File(path, mode) => match OutputFile::open(Path::new(&path), mode) {
                    Ok(mut f) => {
                        if direct {
                            if let Err(why) = f.use_direct() {
                                tracing::info!(
                                    "{path}: writing through the page cache, not O_DIRECT: {why}"
                                );
                            }
                        }
                        Some(Box::new(f))
                    }
                    Err(e) => {
                        let _ = tx.send(Ev::Local(Part::File, format!("{path}: cannot open: {e}")));
                        None
                    }
                },
                Local::Nothing => None,
            };
            Ok(Box::new(Tee {
                local,
                file,
                relay,
                bytes: 0,
                tx,
            }) as Box<dyn TeeOutput>)
        }),
        held,
    );
}
