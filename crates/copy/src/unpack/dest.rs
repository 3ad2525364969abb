//! Where a copy goes ([`Dest`]): read from the destination operand as `cp`
//! reads it; for a striped copy (`rdcp --streams`) the first stream reads
//! DEST and marks its reading, and the others follow that mark, since by
//! the time they look the first may have created DEST (a copy named DEST
//! would then look like a directory to copy into).

use crate::mirror::{self, Mirror, MirrorError};
use crate::stripe::{Marker, Stripe, ARRIVAL};
use rustix::fs::{Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why the destination operand cannot take the copy; its text is the
/// message the user sees.
#[derive(Debug, thiserror::Error)]
pub enum DestError {
    /// A directory (DEST, or the one that gets it) or a device would not
    /// open.
    #[error("cannot open {}: {error}", path.display())]
    Open {
        /// What was opened.
        path: PathBuf,
        /// Why it failed.
        error: io::Error,
    },
    /// Several sources (or a trailing `/`) need a directory, and DEST is
    /// something else.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Several sources (or a trailing `/`) need a directory, and there is
    /// nothing at DEST.
    #[error(
        "{}: no such directory (create it first, or name one source without a trailing /)",
        .0.display()
    )]
    NoSuchDirectory(PathBuf),
    /// DEST has no last component a copy could be created as (`/`, `..`,
    /// a trailing `/`).
    #[error("{}: not a name a copy can take", .0.display())]
    NotAName(PathBuf),
    /// A stream of a striped copy could not make its marker.
    #[error("cannot mark stream {index} of the copy in {}: {error}", dest.display())]
    Mark {
        /// Which stream.
        index: u32,
        /// The destination operand.
        dest: PathBuf,
        /// Why it failed.
        error: io::Error,
    },
    /// A stream other than the first waited for the first one's marker in
    /// vain.
    #[error("{}: the copy's first stream did not start within {} s", dest.display(), ARRIVAL.as_secs())]
    FirstStreamMissing {
        /// The destination operand.
        dest: PathBuf,
    },
}

/// [`DestError::Open`] of `path`.
fn cannot_open(path: &Path) -> impl FnOnce(rustix::io::Errno) -> DestError + '_ {
    move |e| DestError::Open {
        path: path.to_path_buf(),
        error: e.into(),
    }
}

/// Where the stream's top-level entries go.
pub enum Dest {
    /// An existing directory: each top-level entry goes inside it under its own name.
    Into(OwnedFd),
    /// The one top-level entry takes the name `name` in `parent` (`cp a b`
    /// where `b` is not a directory).
    As {
        /// The directory that gets it.
        parent: OwnedFd,
        /// Its name there.
        name: Vec<u8>,
    },
    /// An existing file that is neither a directory nor a regular file
    /// (`/dev/null`, a FIFO, a terminal): one file's data is written straight
    /// into it, as `cp` does, never replaced by a rename (`device.rs`).
    Device(File),
}

impl Dest {
    /// Resolves the destination operand `dest` on this host: an existing
    /// directory (a link to one counts, as for `cp`) receives the entries;
    /// otherwise, unless `must_be_dir` (several sources, or a trailing `/`),
    /// the single entry is created as `dest`.
    ///
    /// `resumed_top`: for `rdcp --resume` of one source named so, a directory
    /// DEST without that name inside is taken to be the copy an interrupted
    /// run started as DEST ([`is_resumed_as`]), not a directory to copy into.
    pub fn open(
        dest: &Path,
        must_be_dir: bool,
        resumed_top: Option<&[u8]>,
    ) -> Result<Dest, DestError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let resumed_as = resumed_top.is_some_and(|t| is_resumed_as(dest, must_be_dir, t));
        match std::fs::metadata(dest) {
            Ok(m) if m.is_dir() && !resumed_as => rustix::fs::open(dest, flags, Mode::empty())
                .map(Dest::Into)
                .map_err(cannot_open(dest)),
            Ok(_) if must_be_dir => Err(DestError::NotADirectory(dest.into())),
            Ok(m) if !m.is_file() && !resumed_as => {
                let flags = OFlags::WRONLY | OFlags::NOCTTY | OFlags::CLOEXEC;
                rustix::fs::open(dest, flags, Mode::empty())
                    .map(|fd| Dest::Device(File::from(fd)))
                    .map_err(cannot_open(dest))
            }
            Err(_) if must_be_dir => Err(DestError::NoSuchDirectory(dest.into())),
            _ => {
                let trailing = dest.as_os_str().as_bytes().ends_with(b"/");
                let (Some(n), false) = (dest.file_name(), trailing) else {
                    return Err(DestError::NotAName(dest.into()));
                };
                let parent = match dest.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                rustix::fs::open(parent, flags, Mode::empty())
                    .map(|parent| Dest::As {
                        parent,
                        name: n.as_bytes().to_vec(),
                    })
                    .map_err(cannot_open(parent))
            }
        }
    }
}

impl Dest {
    /// The destination of a mirror (`rdcp --delete`, [`crate::mirror`]):
    /// DEST resolved and checked ([`mirror::refusal`]) as [`Dest::As`], so
    /// that the stream's one top-level entry becomes DEST itself; `/` is the
    /// name `.` in `/`.
    pub fn mirror(dest: &Path, m: &Mirror) -> Result<Dest, MirrorError> {
        let real = mirror::resolve(dest)?;
        if !m.force {
            if let Some(why) = mirror::refusal(&real, &mirror::homes()) {
                return Err(MirrorError::Refused { path: real, why });
            }
        }
        let (parent, name) = match (real.parent(), real.file_name()) {
            (Some(p), Some(n)) => (p.to_path_buf(), n.as_bytes().to_vec()),
            _ => (PathBuf::from("/"), b".".to_vec()),
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let parent =
            rustix::fs::open(&parent, flags, Mode::empty()).map_err(|e| MirrorError::Open {
                path: parent.clone(),
                error: e.into(),
            })?;
        Ok(Dest::As { parent, name })
    }
}

/// Whether a resumed copy of one source named `top` lands as `dest` itself:
/// `dest` is a directory without `top` inside, so the interrupted run must have
/// created `dest` as the copy (a run into an existing directory creates
/// `dest/top` first of all). The listing and the unpacker decide alike.
pub fn is_resumed_as(dest: &Path, must_be_dir: bool, top: &[u8]) -> bool {
    !must_be_dir
        && !dest.as_os_str().as_bytes().ends_with(b"/")
        && std::fs::metadata(dest).is_ok_and(|m| m.is_dir())
        && std::fs::symlink_metadata(dest.join(std::ffi::OsStr::from_bytes(top))).is_err()
}

impl Dest {
    /// [`Dest::open`] for stream `s` of a striped copy, with its marker
    /// (none for a device: nothing is published there).
    pub fn open_stream(
        dest: &Path,
        must_be_dir: bool,
        resumed_top: Option<&[u8]>,
        s: &Stripe,
    ) -> Result<(Dest, Option<Marker>), DestError> {
        let held = |d: Dest| -> Result<(Dest, Option<Marker>), DestError> {
            let base = match &d {
                Dest::Into(fd) => fd,
                Dest::As { parent, .. } => parent,
                Dest::Device(_) => return Ok((d, None)),
            };
            let m = Marker::hold(base, s).map_err(|error| DestError::Mark {
                index: s.index,
                dest: dest.into(),
                error,
            })?;
            Ok((d, Some(m)))
        };
        let device = std::fs::metadata(dest).is_ok_and(|m| !m.is_dir() && !m.is_file());
        if s.index == 0 || device {
            return held(Dest::open(dest, must_be_dir, resumed_top)?);
        }
        let first = s.marker(0);
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let opened = |p: &Path| rustix::fs::open(p, flags, Mode::empty()).map_err(cannot_open(p));
        // The first stream's marker: a regular file of ours (one planted by
        // someone else does not steer this stream).
        let marked = |dir: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(dir.join(std::ffi::OsStr::from_bytes(&first)))
                .is_ok_and(|m| m.is_file() && m.uid() == rustix::process::geteuid().as_raw())
        };
        let start = Instant::now();
        loop {
            if marked(dest) {
                return held(Dest::Into(opened(dest)?));
            }
            if marked(parent) {
                let name = dest
                    .file_name()
                    .ok_or_else(|| DestError::NotAName(dest.into()))?;
                return held(Dest::As {
                    parent: opened(parent)?,
                    name: name.as_bytes().to_vec(),
                });
            }
            if start.elapsed() > ARRIVAL {
                return Err(DestError::FirstStreamMissing { dest: dest.into() });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each refusal's text is the message the user sees.
    #[test]
    fn refusals_say_what_is_wrong_with_the_destination() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let missing = d.path().join("none");
        let text = |r: Result<Dest, DestError>| r.err().expect("refused").to_string();
        assert_eq!(
            text(Dest::open(&file, true, None)),
            format!("{} is not a directory", file.display())
        );
        assert_eq!(
            text(Dest::open(&missing, true, None)),
            format!(
                "{}: no such directory (create it first, or name one source without a trailing /)",
                missing.display()
            )
        );
        let slash = d.path().join("new/");
        assert_eq!(
            text(Dest::open(&slash, false, None)),
            format!("{}: not a name a copy can take", slash.display())
        );
        let deep = missing.join("x");
        assert_eq!(
            text(Dest::open(&deep, false, None)),
            format!(
                "cannot open {}: {}",
                missing.display(),
                io::Error::from(rustix::io::Errno::NOENT)
            )
        );
    }
}
