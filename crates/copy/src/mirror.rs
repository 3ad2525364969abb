//! `rdcp -r --delete`: the destination becomes a mirror of the one source.
//!
//! [`Mirror`] is the setting both sides of the copy get (the agents'
//! `--mirror SPEC`). With it:
//!
//! - DEST is the source's copy itself, whether it exists or not (as
//!   `rsync -a --delete SRC/ DST/`): the unpacker lands the stream's one
//!   top-level entry as DEST (`Dest::mirror`), never inside it, so a second run
//!   never makes DEST/SRC. DEST is resolved first (a link to a directory is
//!   followed there, as the user named it), and refused when it is `/` or a
//!   home directory (this host's `$HOME` or any in /etc/passwd) unless
//!   `force` ([`refusal`]).
//! - The packer sends an [`Entry::Kept`](rdpipe_wire::entry::Entry::Kept)
//!   for every name it does not send (unchanged at the destination as the
//!   listing says, or a node skipped without `--specials`), so that the
//!   stream names every entry the source has. A dry run (`dry_run`) sends
//!   names only, no data, and the unpacker creates nothing.
//! - Once the stream was verified and every file published, and only when
//!   nothing failed on either side, the unpacker removes beneath DEST what no
//!   entry named (`unpack/prune.rs`); a dry run lists it instead.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// `rdcp --delete`'s setting, for both sides (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mirror {
    /// `-n`: names only; what would be removed is listed, nothing is
    /// written or removed.
    pub dry_run: bool,
    /// `--force-delete`: `/` or a home directory may be the mirror.
    pub force: bool,
    /// `-v`: one line per removed entry.
    pub verbose: bool,
}

impl fmt::Display for Mirror {
    /// `delete` or `dry-run`, then `,force` and `,verbose` where set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.dry_run { "dry-run" } else { "delete" })?;
        if self.force {
            f.write_str(",force")?;
        }
        if self.verbose {
            f.write_str(",verbose")?;
        }
        Ok(())
    }
}

impl Mirror {
    /// The setting [`Mirror`]'s `Display` wrote; `None` for anything else.
    pub fn parse(s: &str) -> Option<Mirror> {
        let mut words = s.split(',');
        let mut m = Mirror {
            dry_run: match words.next()? {
                "delete" => false,
                "dry-run" => true,
                _ => return None,
            },
            ..Mirror::default()
        };
        for w in words {
            match w {
                "force" if !m.force && !m.verbose => m.force = true,
                "verbose" if !m.verbose => m.verbose = true,
                _ => return None,
            }
        }
        Some(m)
    }
}

/// Why a mirror's destination was refused; its text is the message the
/// user sees.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// DEST is `/` or a home directory.
    #[error("{}: --delete refuses to mirror onto {why} (it would remove what the source lacks there); name a directory beneath it, or add --force-delete", path.display())]
    Refused {
        /// DEST as resolved.
        path: PathBuf,
        /// What it is (`/`, a home directory).
        why: String,
    },
    /// DEST (or the directory that gets it) could not be resolved.
    #[error("cannot resolve {}: {error}", path.display())]
    Resolve {
        /// What was resolved.
        path: PathBuf,
        /// Why it failed.
        error: io::Error,
    },
    /// The directory that gets DEST would not open.
    #[error("cannot open {}: {error}", path.display())]
    Open {
        /// That directory.
        path: PathBuf,
        /// Why it failed.
        error: io::Error,
    },
}

/// DEST resolved: links followed as the user named them, `.` and `..`
/// gone; for one that does not exist yet, its parent resolved and its name.
pub fn resolve(dest: &Path) -> Result<PathBuf, MirrorError> {
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |error| MirrorError::Resolve { path, error }
    };
    match std::fs::canonicalize(dest) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let name = dest.file_name().ok_or_else(|| MirrorError::Resolve {
                path: dest.to_path_buf(),
                error: e,
            })?;
            let parent = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            Ok(std::fs::canonicalize(parent)
                .map_err(failed(parent))?
                .join(name))
        }
        Err(e) => Err(failed(dest)(e)),
    }
}

/// Why the resolved `dest` must not be a mirror without `force`: it is `/`,
/// or one of `homes` (resolved too); `None` when it may.
pub fn refusal(dest: &Path, homes: &[PathBuf]) -> Option<String> {
    if dest == Path::new("/") {
        return Some("/".into());
    }
    homes
        .iter()
        .any(|h| h == dest)
        .then(|| "a home directory".into())
}

/// The home directories of this host: `$HOME` and each one /etc/passwd
/// names, resolved (those that do not exist are left out).
pub fn homes() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Ok(text) = std::fs::read_to_string("/etc/passwd") {
        v.extend(text.lines().filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 7 && f[5].starts_with('/')).then(|| PathBuf::from(f[5]))
        }));
    }
    v.into_iter()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_nothing_else_parses() {
        for dry_run in [false, true] {
            for force in [false, true] {
                for verbose in [false, true] {
                    let m = Mirror {
                        dry_run,
                        force,
                        verbose,
                    };
                    assert_eq!(Mirror::parse(&m.to_string()), Some(m));
                }
            }
        }
        for bad in [
            "",
            "Delete",
            "delete,",
            "delete,force,force",
            "delete,verbose,force",
            "force",
            "dry-run,loud",
        ] {
            assert_eq!(Mirror::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn root_and_homes_are_refused() {
        let homes = [PathBuf::from("/home/ann"), PathBuf::from("/root")];
        assert_eq!(refusal(Path::new("/"), &homes).as_deref(), Some("/"));
        assert_eq!(
            refusal(Path::new("/home/ann"), &homes).as_deref(),
            Some("a home directory")
        );
        assert_eq!(refusal(Path::new("/home/ann/backup"), &homes), None);
        assert_eq!(refusal(Path::new("/home"), &homes), None);
    }

    #[test]
    fn a_link_to_the_home_directory_is_the_home_directory() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::symlink(&home, d.path().join("h")).unwrap();
        let real = resolve(&d.path().join("h/")).unwrap();
        let homes = [std::fs::canonicalize(&home).unwrap()];
        assert!(refusal(&real, &homes).is_some());
        // Not there yet: its parent resolved, its name kept.
        let new = resolve(&d.path().join("h/new")).unwrap();
        assert_eq!(new, homes[0].join("new"));
        assert!(refusal(&new, &homes).is_none());
        let e = resolve(&d.path().join("none/x")).err().unwrap();
        assert!(e.to_string().starts_with("cannot resolve "), "{e}");
    }
}
