//! `--persist DURATION`: ssh master connections that outlive a run, so that
//! the next run to the same hosts within DURATION skips the ssh login (the
//! bulk of a short pipeline's start-up, see docs/performance.md).
//!
//! The masters are OpenSSH's own (`ssh -M -f -o ControlPersist=SECS`): no
//! daemon of ours. Their control sockets live in one directory per user,
//! `$XDG_RUNTIME_DIR/rdpipe-persist-UID/` (else under `/tmp`), made 0700 and
//! refused when it is not ours and private; a socket's name is a hash of the
//! ssh options, the destination and the master's index, so a run with other
//! options gets masters of its own. A master ends by itself once no run has
//! used it for DURATION; `rdpipe --persist-stop` ends them all now.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Why the directory of persistent masters cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// It could not be created or read.
    #[error("{}: {source}", dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not this user's private directory.
    #[error("{} is not a private directory of this user (0700, owned by uid {uid}); remove it", dir.display())]
    NotPrivate {
        /// The directory.
        dir: PathBuf,
        /// This user's uid.
        uid: u32,
    },
}

/// The directory of this user's persistent masters (created if missing).
pub fn dir() -> Result<PathBuf, PersistError> {
    let uid = rustix::process::getuid().as_raw();
    let d = crate::runtime_dir().join(format!("rdpipe-persist-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(PersistError::Io { dir: d, source }),
    }
    let md = match std::fs::symlink_metadata(&d) {
        Ok(md) => md,
        Err(source) => return Err(PersistError::Io { dir: d, source }),
    };
    if !md.is_dir() || md.uid() != uid || md.permissions().mode() & 0o077 != 0 {
        return Err(PersistError::NotPrivate { dir: d, uid });
    }
    Ok(d)
}

/// The control socket of master `n` for `dest` reached with `ssh_args`.
pub fn socket(dir: &Path, ssh_args: &[String], dest: &str, n: usize) -> PathBuf {
    let mut h = blake3::Hasher::new();
    for a in ssh_args {
        h.update(a.as_bytes());
        h.update(b"\0");
    }
    h.update(dest.as_bytes());
    let hex: String = h.finalize().as_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("{hex}-{n}"))
}

/// Ends every persistent master of this user (`ssh -O exit`); returns how many.
pub fn stop_all() -> Result<usize, PersistError> {
    let d = dir()?;
    let mut n = 0;
    let entries = match std::fs::read_dir(&d) {
        Ok(e) => e,
        Err(source) => return Err(PersistError::Io { dir: d, source }),
    };
    for e in entries.filter_map(Result::ok) {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "log") {
            let _ = std::fs::remove_file(&p);
            continue;
        }
        let ok = Command::new("ssh")
            .arg("-S")
            .arg(&p)
            .args(["-O", "exit", "rdpipe-persist"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            n += 1;
        }
        let _ = std::fs::remove_file(&p);
    }
    Ok(n)
}
