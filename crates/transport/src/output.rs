//! Output files that are never left half-written: [`OutputFile`] is what
//! `rdrecv PORT KEY FILE` and rdpipe's `HOST:'> FILE'` / `'>> FILE'` write into.
//!
//! - `> FILE` (and rdrecv's FILE): the stream goes into a temporary file in the
//!   same directory (`.FILE.rdpipe-PID-N`, created exclusively and private to
//!   its owner, 0600), which replaces FILE by `rename` only once the whole
//!   stream was verified. Just before the rename it gets its final permission
//!   bits: FILE's when it exists, else 0666 less the umask, as a shell's `>`
//!   would make it. So no other user can open the temporary file while it is
//!   being written: a descriptor opened then would survive the rename and
//!   read a file that was meant to be private (docs/security.md). A failed
//!   stream removes the temporary file and leaves FILE exactly as it was (or
//!   absent).
//! - `>> FILE`: appended in place (a pipeline may append to a log that others
//!   read); a failed stream truncates FILE back to its length before.
//! - A FILE that exists and is not a regular file (`/dev/null`, a FIFO, a
//!   device) is written directly: there is nothing to replace.
//! - A FILE that is a symbolic link is followed, as a shell's `>` follows it: the
//!   file it points to is replaced (the temporary file lives beside it), and the
//!   link stays.
//!
//! The receive loop ([`crate::pump::recv_stream`]) flushes its output exactly
//! once, after the stream was verified and before it confirms it to the sender:
//! that flush publishes the file (rename, or keep the appended bytes).
//!
//! With [`OutputFile::use_direct`] (`--direct`) the file is written with
//! `O_DIRECT` ([`crate::direct`]); the temporary file, the rename and the undo
//! stay the same.
//!
//! A process that is about to exit on a signal (rdrecv on Ctrl-C) runs no
//! destructors: it calls [`undo_pending`] first, which undoes every output file
//! not yet published, as dropping it would.

use crate::direct::{Direct, Fallback};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// How the stream goes into its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Replace the file once the stream is verified.
    Replace,
    /// Append, and undo the append when the stream fails.
    Append,
}

enum State {
    /// Writing the temporary file `tmp` (0600), to be given `mode` and
    /// renamed to `target`.
    Replacing {
        tmp: PathBuf,
        target: PathBuf,
        mode: u32,
    },
    /// Appending; `start` is the length before.
    Appending { start: u64 },
    /// Writing straight into a non-regular file.
    Direct,
    /// Published (or failed): nothing to undo.
    Done,
}

/// An output file that becomes visible (or keeps its appended bytes) only when
/// the stream was verified; see the module doc.
pub struct OutputFile {
    file: File,
    state: State,
    /// Its entry in [`PENDING`] while it has something to undo.
    pending: Option<u64>,
    /// `O_DIRECT` writing, when asked for and possible.
    direct: Option<Direct>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// What undoing an unpublished output file takes, without the `OutputFile`.
enum Undo {
    RemoveTemp(PathBuf),
    Truncate(File, u64),
}

/// The output files of this process not yet published or dropped.
static PENDING: Mutex<Vec<(u64, Undo)>> = Mutex::new(Vec::new());
static PENDING_ID: AtomicU64 = AtomicU64::new(0);

fn register(undo: Undo) -> u64 {
    let id = PENDING_ID.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut p) = PENDING.lock() {
        p.push((id, undo));
    }
    id
}

fn unregister(id: Option<u64>) {
    if let (Some(id), Ok(mut p)) = (id, PENDING.lock()) {
        p.retain(|(i, _)| *i != id);
    }
}

/// Undoes every output file of this process that was not published yet
/// (removes its temporary file, or truncates an append back): for a process
/// about to exit without running destructors (on a signal). The files stay
/// open; writes into them after this are lost with them.
pub fn undo_pending() {
    let pending = match PENDING.lock() {
        Ok(mut p) => std::mem::take(&mut *p),
        Err(_) => return,
    };
    for (_, undo) in pending {
        match undo {
            Undo::RemoveTemp(tmp) => {
                let _ = std::fs::remove_file(tmp);
            }
            Undo::Truncate(file, start) => {
                let _ = file.set_len(start);
            }
        }
    }
}

/// This process's umask, read without changing it (`umask(2)` can only be
/// read by setting it, which races with other threads creating files):
/// Linux's `/proc/self/status` has it; where it cannot be read, 022.
pub fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

fn temp_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    target.with_file_name(format!(".{name}.rdpipe-{}-{n}", std::process::id()))
}

impl OutputFile {
    /// Opens `path` for a stream written in `mode`.
    pub fn open(path: &Path, mode: Mode) -> io::Result<OutputFile> {
        // Follow a symbolic link to what it names (a dangling one is created).
        let target = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(_) => match std::fs::read_link(path) {
                Ok(l) => path.parent().unwrap_or(Path::new(".")).join(l),
                Err(_) => path.to_path_buf(),
            },
        };
        let meta = std::fs::metadata(&target).ok();
        if meta.as_ref().is_some_and(|m| !m.is_file()) {
            let file = OpenOptions::new()
                .write(true)
                .append(mode == Mode::Append)
                .open(&target)?;
            return Ok(OutputFile {
                file,
                state: State::Direct,
                pending: None,
                direct: None,
            });
        }
        match mode {
            Mode::Append => {
                let mut file = OpenOptions::new().append(true).create(true).open(&target)?;
                let start = file.seek(io::SeekFrom::End(0))?;
                let pending = Some(register(Undo::Truncate(file.try_clone()?, start)));
                Ok(OutputFile {
                    file,
                    state: State::Appending { start },
                    pending,
                    direct: None,
                })
            }
            Mode::Replace => {
                let tmp = temp_name(&target);
                // Private from its creation: the final bits only once the
                // stream is verified (the module doc says why).
                let file = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)?;
                let mode = match meta {
                    Some(m) => m.permissions().mode() & 0o7777,
                    None => 0o666 & !umask(),
                };
                let pending = Some(register(Undo::RemoveTemp(tmp.clone())));
                Ok(OutputFile {
                    file,
                    state: State::Replacing { tmp, target, mode },
                    pending,
                    direct: None,
                })
            }
        }
    }

    /// Writes the stream with `O_DIRECT` from here on (`--direct`; call before
    /// the first write). When that cannot be, says why; the file is then written
    /// through the page cache as usual, with the same bytes.
    pub fn use_direct(&mut self) -> Result<(), Fallback> {
        let at = match self.state {
            State::Replacing { .. } => 0,
            State::Appending { start } => start,
            State::Direct | State::Done => return Err(Fallback::NotRegular),
        };
        self.direct = Some(Direct::enable(&self.file, at)?);
        Ok(())
    }

    /// Publishes the verified stream (see the module doc). Called by `flush`.
    fn publish(&mut self) -> io::Result<()> {
        if let Some(d) = &mut self.direct {
            d.finish(&mut self.file)?;
        }
        self.file.flush()?;
        unregister(self.pending.take());
        match std::mem::replace(&mut self.state, State::Done) {
            State::Replacing { tmp, target, mode } => {
                let chmod = if mode == 0o600 {
                    Ok(())
                } else {
                    self.file
                        .set_permissions(std::fs::Permissions::from_mode(mode))
                };
                if let Err(e) = chmod.and_then(|()| std::fs::rename(&tmp, &target)) {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            }
            State::Appending { .. } | State::Direct | State::Done => {}
        }
        Ok(())
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.direct {
            Some(d) => d.write(&mut self.file, buf),
            None => self.file.write(buf),
        }
    }

    /// The receive loop's one flush, after verification: publishes the file.
    fn flush(&mut self) -> io::Result<()> {
        self.publish()
    }
}

impl Drop for OutputFile {
    /// Not published: the stream failed. Undo what it wrote.
    fn drop(&mut self) {
        unregister(self.pending.take());
        match std::mem::replace(&mut self.state, State::Done) {
            State::Replacing { tmp, .. } => {
                let _ = std::fs::remove_file(tmp);
            }
            State::Appending { start } => {
                let _ = self.file.set_len(start);
            }
            State::Direct | State::Done => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replace_publishes_only_on_flush() {
        let d = dir();
        let p = d.path().join("out");
        std::fs::write(&p, b"old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut f = OutputFile::open(&p, Mode::Replace).unwrap();
        f.write_all(b"new content").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        f.flush().unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"new content");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(entries(d.path()), ["out"]);
    }

    #[test]
    fn the_temporary_file_is_private_until_published() {
        let d = dir();
        let p = d.path().join("new");
        let mut f = OutputFile::open(&p, Mode::Replace).unwrap();
        f.write_all(b"secret").unwrap();
        let tmp = entries(d.path());
        assert_eq!(tmp.len(), 1, "{tmp:?}");
        let m = std::fs::metadata(d.path().join(&tmp[0])).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        f.flush().unwrap();
        drop(f);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            mode,
            0o666 & !umask(),
            "a new file gets 0666 less the umask"
        );
    }

    #[test]
    fn a_failed_replace_leaves_the_old_file_and_no_temporary() {
        let d = dir();
        let p = d.path().join("out");
        std::fs::write(&p, b"old").unwrap();
        let mut f = OutputFile::open(&p, Mode::Replace).unwrap();
        f.write_all(b"partial").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(entries(d.path()), ["out"]);
        // And a file that did not exist stays absent.
        let q = d.path().join("new");
        drop(OutputFile::open(&q, Mode::Replace).unwrap());
        assert!(!q.exists());
    }

    #[test]
    fn a_failed_append_is_undone() {
        let d = dir();
        let p = d.path().join("log");
        std::fs::write(&p, b"line 1\n").unwrap();
        let mut f = OutputFile::open(&p, Mode::Append).unwrap();
        f.write_all(b"partial").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"line 1\n");
        let mut f = OutputFile::open(&p, Mode::Append).unwrap();
        f.write_all(b"line 2\n").unwrap();
        f.flush().unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"line 1\nline 2\n");
    }

    #[test]
    fn a_symlink_is_followed_and_kept() {
        let d = dir();
        let real = d.path().join("real");
        let link = d.path().join("link");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut f = OutputFile::open(&link, Mode::Replace).unwrap();
        f.write_all(b"new").unwrap();
        f.flush().unwrap();
        drop(f);
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
    }

    #[test]
    fn a_device_is_written_directly() {
        let mut f = OutputFile::open(Path::new("/dev/null"), Mode::Replace).unwrap();
        f.write_all(b"x").unwrap();
        f.flush().unwrap();
        assert!(Path::new("/dev/null").exists());
    }
}
