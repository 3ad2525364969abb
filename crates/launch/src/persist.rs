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

/// The directory of this user's persistent masters (created if missing).
pub fn dir() -> Result<PathBuf, String> {
    let uid = rustix::process::getuid().as_raw();
    let d = crate::runtime_dir().join(format!("rdpipe-persist-{uid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", d.display())),
    }
    let md = std::fs::symlink_metadata(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    if !md.is_dir() || md.uid() != uid || md.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a private directory of this user (0700, owned by uid {uid}); remove it",
            d.display()
        ));
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
pub fn stop_all() -> Result<usize, String> {
    let d = dir()?;
    let mut n = 0;
    let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
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
