//! Re-attach: how a new control channel reaches an agent whose ssh session
//! died (`--reattach SECS`).
//!
//! The agent listens on a Unix socket in a directory of its own (mode 0700,
//! a random name in `/tmp`: not `$XDG_RUNTIME_DIR`, which systemd removes
//! when the user's last session ends, and the lost one may be that) and
//! tells rdpipe its path (`DETACHABLE PATH`). rdpipe opens a new ssh session that runs
//! `rdrecv --agent-attach PATH` ([`helper_main`]): the helper connects and
//! hands its own stdin, stdout and stderr (the new session's) to the agent
//! with `SCM_RIGHTS`, then waits until the agent closes the connection
//! (when it exits, or when that channel is lost too). The agent accepts only
//! a peer of its own uid (`SO_PEERCRED`; the directory already keeps other
//! users out) whose session's first line is `ATTACH KEY N` with the secret
//! rdpipe sent as `ATTACHKEY` on the first channel (compared in constant
//! time). The secret is never on a command line or in an environment. The
//! helper, in turn, hands the channel (and so the secret) only to a socket in
//! a directory of its own uid with mode 0700, not a symbolic link, whose
//! listener is of its own uid: a name in `/tmp` that another user made after
//! the agent's directory went away gets nothing.

use rdpipe_control::ToAgent;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The helper's exit status when no agent answers at the path (it ended, or
/// never was): rdpipe stops trying to re-attach.
pub const NO_AGENT: u8 = 3;

/// How long a new channel has to send its `ATTACH` line.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Why an attach attempt was turned away (the agent goes on waiting for the
/// next one until its deadline).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The peer is another user.
    #[error("a process of uid {0} tried to attach")]
    OtherUser(u32),
    /// The peer sent no descriptors, or not three.
    #[error("the attaching process sent no channel")]
    NoChannel,
    /// No `ATTACH` line in time, or another line.
    #[error("no ATTACH line on the new channel")]
    NoAttachLine,
    /// The secret did not match.
    #[error("the attaching process presented a wrong secret")]
    WrongSecret,
    /// The socket failed.
    #[error("attach socket: {0}")]
    Io(#[from] io::Error),
}

/// A new control channel, handed over by the helper and authenticated.
pub struct Channel {
    /// rdpipe's lines from now on.
    pub stdin: File,
    /// The agent's lines from now on.
    pub stdout: File,
    /// The agent's (and its command's) stderr from now on.
    pub stderr: OwnedFd,
    /// How many of the agent's lines rdpipe already has.
    pub rdpipe_has: u64,
    /// The helper's connection: it waits on it, and ends (closing its ssh
    /// session) when the agent drops this.
    pub helper: UnixStream,
}

/// The agent's attach socket; removed with its directory on drop.
pub struct Listener {
    dir: PathBuf,
    path: PathBuf,
    sock: UnixListener,
}

/// The directory the socket's own directory goes in (short: `sun_path` has
/// 108 bytes; lasting: not removed when the user's sessions end).
fn runtime_dir() -> PathBuf {
    PathBuf::from("/tmp")
}

/// Removes the socket at `path` and its directory (at the agent's exit: the
/// thread that serves it is never joined, so its [`Listener`] is never
/// dropped).
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(d) = path.parent() {
        let _ = std::fs::remove_dir(d);
    }
}

/// Whether `path`'s directory is this user's own private one: owned by
/// this uid, mode 0700, not a symbolic link.
fn private_dir(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("no directory"))?;
    let m = std::fs::symlink_metadata(dir)?;
    let me = rustix::process::getuid().as_raw();
    if !m.is_dir() || m.uid() != me || m.mode() & 0o777 != 0o700 {
        return Err(io::Error::other(format!(
            "{} is not a private directory of this user",
            dir.display()
        )));
    }
    Ok(())
}

/// The secret a channel must present: none until rdpipe sent `ATTACHKEY`.
pub type Secret = Arc<Mutex<Option<Vec<u8>>>>;

impl Listener {
    /// A new socket in a new private directory.
    pub fn open() -> io::Result<Listener> {
        let base = runtime_dir();
        let mut last = None;
        for _ in 0..8 {
            let mut r = [0u8; 6];
            getrandom::getrandom(&mut r).map_err(|e| io::Error::other(e.to_string()))?;
            let dir = base.join(format!("rdpipe-a-{}", rdpipe_control::encode_hex(&r)));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let path = dir.join("s");
                    return match UnixListener::bind(&path) {
                        Ok(sock) => Ok(Listener { dir, path, sock }),
                        Err(e) => {
                            let _ = std::fs::remove_dir(&dir);
                            Err(e)
                        }
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free name")))
    }

    /// The socket's path (for `DETACHABLE`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts channels for the rest of the process's life, on a thread:
    /// each one that presents `secret` goes to `taken` (a new channel
    /// replaces the current one even when that one still seems alive: a
    /// connection a firewall forgot is only noticed from one side); each
    /// refused one is logged.
    pub fn serve(
        &self,
        secret: Secret,
        taken: impl Fn(Channel) + Send + Sync + 'static,
    ) -> io::Result<()> {
        let sock = self.sock.try_clone()?;
        let taken = Arc::new(taken);
        std::thread::Builder::new()
            .name("attach".into())
            .spawn(move || loop {
                let s = match sock.accept() {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!("re-attach socket: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                };
                // One thread per attempt: a peer that sends nothing holds
                // up only itself.
                let (secret, taken) = (secret.clone(), taken.clone());
                let _ = std::thread::Builder::new()
                    .name("attaching".into())
                    .spawn(move || {
                        let key = secret.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        match take(s, key.as_deref()) {
                            Ok(ch) => taken(ch),
                            Err(e) => tracing::warn!("re-attach refused: {e}"),
                        }
                    });
            })?;
        Ok(())
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Checks one connection: its uid, its three descriptors, its `ATTACH` line.
fn take(s: UnixStream, secret: Option<&[u8]>) -> Result<Channel, Refused> {
    s.set_nonblocking(false)?;
    let cred = rustix::net::sockopt::get_socket_peercred(&s).map_err(io::Error::from)?;
    let me = rustix::process::getuid();
    if cred.uid != me {
        return Err(Refused::OtherUser(cred.uid.as_raw()));
    }
    s.set_read_timeout(Some(HANDSHAKE))?;
    let mut space = [0u8; rustix::cmsg_space!(ScmRights(3))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let got = rustix::net::recvmsg(
        &s,
        &mut [IoSliceMut::new(&mut byte)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(io::Error::from)?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(r) = m {
            fds.extend(r);
        }
    }
    if got.bytes != 1 || fds.len() != 3 {
        return Err(Refused::NoChannel);
    }
    let stderr = fds.pop().expect("three");
    let stdout = File::from(fds.pop().expect("three"));
    let mut stdin = File::from(fds.pop().expect("three"));
    let line = read_line(&mut stdin, Instant::now() + HANDSHAKE).ok_or(Refused::NoAttachLine)?;
    match line.trim_end().parse::<ToAgent>() {
        Ok(ToAgent::Attach {
            secret: given,
            received,
        }) => {
            if !secret.is_some_and(|k| same(&given, k)) {
                return Err(Refused::WrongSecret);
            }
            s.set_read_timeout(None)?;
            Ok(Channel {
                stdin,
                stdout,
                stderr,
                rdpipe_has: received,
                helper: s,
            })
        }
        _ => Err(Refused::NoAttachLine),
    }
}

/// One line from `f`, a byte at a time (nothing past it is consumed: the
/// channel's reader takes over from there), by `deadline`.
fn read_line(f: &mut File, deadline: Instant) -> Option<String> {
    let mut line = Vec::new();
    while line.len() < 512 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fds = [rustix::event::PollFd::new(
            &*f,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, left.as_millis().clamp(1, 1000) as i32) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(_) => return None,
        }
        let mut b = [0u8; 1];
        match f.read(&mut b) {
            Ok(0) => return None,
            Ok(_) if b[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(_) => line.push(b[0]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    None
}

/// Whether `a` and `b` are equal, in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// `rdrecv --agent-attach PATH`: hands this process's stdin, stdout and
/// stderr to the agent at PATH and waits until it lets go. Exit status
/// [`NO_AGENT`] when nothing answers there.
pub fn helper_main<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> std::process::ExitCode {
    let args: Vec<_> = args.into_iter().collect();
    let [path] = &args[..] else {
        eprintln!("rdrecv: --agent-attach takes one socket path");
        return std::process::ExitCode::from(2);
    };
    let path = Path::new(path);
    let s = match private_dir(path).and_then(|()| UnixStream::connect(path)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "rdrecv: no agent at {}: {e}",
                rdpipe_term::escaped(&path.to_string_lossy())
            );
            // A socket (in our own directory) whose agent is gone
            // (SIGKILL): nothing will answer.
            if e.kind() == io::ErrorKind::ConnectionRefused {
                remove(path);
            }
            return std::process::ExitCode::from(NO_AGENT);
        }
    };
    let me = rustix::process::getuid();
    match rustix::net::sockopt::get_socket_peercred(&s) {
        Ok(c) if c.uid == me => {}
        _ => {
            eprintln!("rdrecv: the agent socket's listener is not this user's");
            return std::process::ExitCode::from(NO_AGENT);
        }
    }
    let (i, o, e) = (io::stdin(), io::stdout(), io::stderr());
    let fds = [i.as_fd(), o.as_fd(), e.as_fd()];
    let mut space = [0u8; rustix::cmsg_space!(ScmRights(3))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    if let Err(e) = rustix::net::sendmsg(&s, &[IoSlice::new(b"A")], &mut anc, SendFlags::empty()) {
        eprintln!("rdrecv: cannot hand the channel to the agent: {e}");
        return std::process::ExitCode::from(NO_AGENT);
    }
    // The agent holds the channel now; wait until it closes the connection.
    let mut b = [0u8; 64];
    let mut s = s;
    while let Ok(1..) = s.read(&mut b) {}
    std::process::ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn the_socket_is_private_and_removed() {
        let l = Listener::open().expect("socket");
        let dir = l.path().parent().unwrap().to_path_buf();
        let mode = std::fs::metadata(&dir).unwrap().permissions();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o700);
        assert!(l.path().exists());
        drop(l);
        assert!(!dir.exists());
    }

    #[test]
    fn a_connection_without_a_channel_or_secret_is_refused() {
        let l = Listener::open().expect("socket");
        let (tx, rx) = std::sync::mpsc::channel();
        let secret: Secret = Arc::new(Mutex::new(Some(vec![7; 32])));
        l.serve(secret, move |_| {
            let _ = tx.send(());
        })
        .unwrap();
        drop(UnixStream::connect(l.path()).unwrap());
        // A channel whose ATTACH line has the wrong secret.
        let (a, mut b) = UnixStream::pair().unwrap();
        let c = UnixStream::connect(l.path()).unwrap();
        let fds = [a.as_fd(), a.as_fd(), a.as_fd()];
        let mut space = [0u8; rustix::cmsg_space!(ScmRights(3))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        anc.push(SendAncillaryMessage::ScmRights(&fds));
        rustix::net::sendmsg(&c, &[IoSlice::new(b"A")], &mut anc, SendFlags::empty()).unwrap();
        let line = ToAgent::Attach {
            secret: vec![8; 32],
            received: 0,
        };
        std::io::Write::write_all(&mut b, format!("{line}\n").as_bytes()).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    }
}
