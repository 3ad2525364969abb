//! A whole path's wildcards expanded on this host ([`expand`]): component
//! by component, reading only the directories a wildcard component needs
//! (links to directories are followed on the way, as glob(3) does); the
//! matches sorted in byte order.

use super::Pattern;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// Why a pattern gave no path; its text is the message the user sees.
#[derive(Debug, thiserror::Error)]
pub enum GlobError {
    /// Nothing matches.
    #[error("{pattern}: no such file or directory (nothing matches the pattern; quote a literal *, ? or [ with \\)")]
    NoMatch {
        /// The pattern as given.
        pattern: String,
    },
    /// Nothing matches, and a directory on the way could not be read.
    #[error("{pattern}: nothing matches, and directory {} cannot be read: {error}", dir.display())]
    Unreadable {
        /// The pattern as given.
        pattern: String,
        /// The directory.
        dir: PathBuf,
        /// Why.
        error: io::Error,
    },
}

impl GlobError {
    /// The same error naming `pattern` (the operand as the user wrote it,
    /// before `~` was expanded).
    pub fn for_pattern(self, pattern: &str) -> GlobError {
        let pattern = pattern.to_string();
        match self {
            GlobError::NoMatch { .. } => GlobError::NoMatch { pattern },
            GlobError::Unreadable { dir, error, .. } => GlobError::Unreadable {
                pattern,
                dir,
                error,
            },
        }
    }
}

/// The paths that match `pattern` (see the [module](super) doc), sorted in
/// byte order; none is an error. A trailing `/` matches directories only
/// and stays on each match.
pub fn expand(pattern: &str) -> Result<Vec<PathBuf>, GlobError> {
    let trailing = pattern.ends_with('/');
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let mut found: Vec<Vec<u8>> = vec![if pattern.starts_with('/') {
        b"/".to_vec()
    } else {
        Vec::new()
    }];
    let mut unreadable: Option<(PathBuf, io::Error)> = None;
    let mut last_literal = true;
    for (k, c) in comps.iter().enumerate() {
        let p = Pattern::new(c);
        let last = k + 1 == comps.len();
        let join = |base: &[u8], name: &[u8]| {
            let mut v = base.to_vec();
            if !v.is_empty() && !v.ends_with(b"/") {
                v.push(b'/');
            }
            v.extend_from_slice(name);
            v
        };
        let mut next = Vec::new();
        match p.literal() {
            Some(name) => {
                last_literal = true;
                next.extend(found.iter().map(|b| join(b, &name)));
            }
            None => {
                last_literal = false;
                for base in &found {
                    let dir = if base.is_empty() { &b"."[..] } else { base };
                    let dir = PathBuf::from(OsStr::from_bytes(dir));
                    let rd = match std::fs::read_dir(&dir) {
                        Ok(rd) => rd,
                        Err(e) => {
                            if e.kind() != io::ErrorKind::NotFound
                                && e.raw_os_error()
                                    != Some(rustix::io::Errno::NOTDIR.raw_os_error())
                            {
                                unreadable.get_or_insert((dir, e));
                            }
                            continue;
                        }
                    };
                    let mut names: Vec<Vec<u8>> = rd
                        .filter_map(Result::ok)
                        .map(|e| e.file_name().into_vec())
                        .filter(|n| p.matches(n))
                        .collect();
                    names.sort_unstable();
                    for n in names {
                        let path = join(base, &n);
                        // On the way (or with a trailing `/`): directories only.
                        if (!last || trailing) && !is_dir(&path) {
                            continue;
                        }
                        next.push(path);
                    }
                }
            }
        }
        found = next;
    }
    if last_literal {
        // A literal last component (or a pattern of literal components
        // only): the paths that exist.
        found.retain(|p| {
            let p = OsStr::from_bytes(p);
            if trailing {
                std::fs::metadata(p).is_ok_and(|m| m.is_dir())
            } else {
                std::fs::symlink_metadata(p).is_ok()
            }
        });
    }
    if comps.is_empty() {
        // `/` alone (no wildcard: not a pattern anyway).
        found.retain(|p| !p.is_empty());
    }
    if found.is_empty() {
        return Err(match unreadable {
            Some((dir, error)) => GlobError::Unreadable {
                pattern: pattern.into(),
                dir,
                error,
            },
            None => GlobError::NoMatch {
                pattern: pattern.into(),
            },
        });
    }
    found.sort_unstable();
    found.dedup();
    Ok(found
        .into_iter()
        .map(|mut p| {
            if trailing && !p.ends_with(b"/") {
                p.push(b'/');
            }
            PathBuf::from(std::ffi::OsString::from_vec(p))
        })
        .collect())
}

fn is_dir(p: &[u8]) -> bool {
    std::fs::metadata(OsStr::from_bytes(p)).is_ok_and(|m| m.is_dir())
}
