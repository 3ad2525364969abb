//! What rdcp keeps on a host between two steps of one copy (the destination's
//! listing that `--resume` and `--checksum` write on the sources' host and the
//! packer then reads) lives in a directory of that copy's own:
//! `$TMPDIR/.rdcp-ID` (`/tmp` without `TMPDIR`), ID being 128 random bits in
//! hex that rdcp chose. It is made with `mkdir` 0700 (so it is new: a name
//! someone else planted makes it fail) and checked to be a directory this
//! user owns that nobody else may enter, both when made and when opened. A
//! listing holds every destination name, size, mtime and, with `-c`, content
//! hash: nobody else may read it, nor plant a file in its place.
//!
//! The packer removes the directory once it read the listing (with
//! `--streams`, the last of the streams to read it). A run killed between
//! the two steps leaves it behind, still private; the next copy that makes
//! one on that host removes this user's directories older than [`STALE`].

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Age past which a copy's directory is taken for one a killed run left:
/// a listing lives from the listing step's end to the copy's start.
pub const STALE: Duration = Duration::from_secs(3600);

/// The name's prefix.
const PREFIX: &str = ".rdcp-";

/// Whether `id` is what rdcp makes: 32 lowercase hex digits.
pub fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A new random id.
pub fn new_id() -> io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(b.iter().map(|b| format!("{b:02x}")).collect())
}

fn path_of(base: &Path, id: &str) -> io::Result<PathBuf> {
    if !valid_id(id) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{id:?} is not an rdcp run id"),
        ));
    }
    Ok(base.join(format!("{PREFIX}{id}")))
}

/// Checks that `p` is a directory of this user's that only it may use.
fn check(p: &Path) -> io::Result<()> {
    let md = std::fs::symlink_metadata(p)?;
    let me = rustix::process::geteuid().as_raw();
    if !md.is_dir() || md.uid() != me || md.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} is not this copy's private directory (a directory of uid {me}, mode 0700)",
            p.display()
        )));
    }
    Ok(())
}

/// Makes copy `id`'s directory in `base` (see the module doc); removes this
/// user's stale ones first.
pub fn create_in(base: &Path, id: &str) -> io::Result<PathBuf> {
    let p = path_of(base, id)?;
    sweep(base, STALE);
    std::fs::DirBuilder::new().mode(0o700).create(&p)?;
    check(&p)?;
    Ok(p)
}

/// Copy `id`'s directory in `base`, checked.
pub fn open_in(base: &Path, id: &str) -> io::Result<PathBuf> {
    let p = path_of(base, id)?;
    check(&p)?;
    Ok(p)
}

/// Removes copy `id`'s directory in `base` and what is in it.
pub fn remove_in(base: &Path, id: &str) -> io::Result<()> {
    let p = path_of(base, id)?;
    check(&p)?;
    std::fs::remove_dir_all(&p)
}

/// [`create_in`] the temporary directory.
pub fn create(id: &str) -> io::Result<PathBuf> {
    create_in(&std::env::temp_dir(), id)
}

/// [`open_in`] the temporary directory.
pub fn open(id: &str) -> io::Result<PathBuf> {
    open_in(&std::env::temp_dir(), id)
}

/// [`remove_in`] the temporary directory.
pub fn remove(id: &str) -> io::Result<()> {
    remove_in(&std::env::temp_dir(), id)
}

/// Removes this user's copy directories in `base` not changed for `age`.
pub fn sweep(base: &Path, age: Duration) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
            continue;
        };
        if !valid_id(id) || check(&e.path()).is_err() {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|d| d >= age);
        if old {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_made_checked_and_removed() {
        let base = tempfile::tempdir().unwrap();
        let id = new_id().unwrap();
        assert!(valid_id(&id));
        let p = create_in(base.path(), &id).unwrap();
        let md = std::fs::metadata(&p).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o700);
        assert_eq!(open_in(base.path(), &id).unwrap(), p);
        // A second create of the same id fails: the name must be new.
        assert!(create_in(base.path(), &id).is_err());
        std::fs::write(p.join("listing"), b"x").unwrap();
        remove_in(base.path(), &id).unwrap();
        assert!(!p.exists());
        // Ids are what rdcp makes, nothing that walks out of the base.
        for bad in ["../x", "", "0123", &"g".repeat(32), &"A".repeat(32)] {
            assert!(open_in(base.path(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_directory_others_may_enter_or_a_link_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let id = new_id().unwrap();
        let p = base.path().join(format!("{PREFIX}{id}"));
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(open_in(base.path(), &id).is_err());
        std::fs::remove_dir(&p).unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), &p).unwrap();
        assert!(open_in(base.path(), &id).is_err());
        assert!(remove_in(base.path(), &id).is_err());
        assert!(elsewhere.path().exists());
    }

    #[test]
    fn the_sweep_takes_only_old_directories_of_ours() {
        use rustix::fs::{utimensat, AtFlags, Timespec, Timestamps, CWD};
        let base = tempfile::tempdir().unwrap();
        let (old, new) = (new_id().unwrap(), new_id().unwrap());
        let po = create_in(base.path(), &old).unwrap();
        let other = base.path().join(".rdcp-not-an-id");
        std::fs::create_dir(&other).unwrap();
        // Two hours ago, as a killed run's would be.
        let then = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            - 2 * STALE;
        let t = Timespec {
            tv_sec: then.as_secs() as _,
            tv_nsec: 0,
        };
        for p in [&po, &other] {
            let times = Timestamps {
                last_access: t,
                last_modification: t,
            };
            utimensat(CWD, p.as_path(), &times, AtFlags::empty()).unwrap();
        }
        let pn = create_in(base.path(), &new).unwrap();
        assert!(!po.exists(), "the old one went with the next create");
        assert!(pn.exists());
        assert!(other.exists(), "not a name rdcp makes");
    }
}
