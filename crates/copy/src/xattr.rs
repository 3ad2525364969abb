//! Extended attributes for `rdcp --xattrs`: which ones travel, how they are
//! read from a source and set on a destination.
//!
//! Copied: the `user.*` namespace and POSIX ACLs (`system.posix_acl_access`,
//! `system.posix_acl_default`, as `getfattr`/`setfacl` store them). Not
//! copied, on either side: `security.*` (SELinux labels, file capabilities:
//! `security.capability` would let a sender hand out privileges) and
//! `trusted.*` (root's own); a receiver refuses a stream that carries them.
//! Values over [`MAX_XATTR_VALUE`] bytes (rare) are skipped with a warning.

use rdpipe_wire::entry::{MAX_XATTR_NAME, MAX_XATTR_VALUE};
use std::ffi::CString;
use std::io;
use std::os::fd::AsFd;

/// The most attributes one entry may carry (a receiver refuses more).
pub const MAX_PER_ENTRY: usize = 128;

/// Whether an attribute of this name is copied.
pub fn copied(name: &[u8]) -> bool {
    name.starts_with(b"user.")
        || name == b"system.posix_acl_access"
        || name == b"system.posix_acl_default"
}

/// One attribute: name and value.
pub type Attr = (Vec<u8>, Vec<u8>);

/// The copied attributes of the open file or directory `fd`, in name order,
/// and the names of those skipped for their size.
pub fn read<F: AsFd>(fd: F) -> io::Result<(Vec<Attr>, Vec<String>)> {
    let fd = fd.as_fd();
    let mut names = vec![0u8; 1024];
    let n = loop {
        match rustix::fs::flistxattr(fd, &mut names) {
            Ok(n) => break n,
            Err(rustix::io::Errno::RANGE) => {
                let need = rustix::fs::flistxattr(fd, &mut [])?;
                names.resize(need.max(names.len() * 2), 0);
            }
            // A file system without extended attributes has none to copy.
            Err(rustix::io::Errno::NOTSUP) => return Ok((vec![], vec![])),
            Err(e) => return Err(e.into()),
        }
    };
    names.truncate(n);
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    let mut value = vec![0u8; MAX_XATTR_VALUE];
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if !copied(name) || name.len() > MAX_XATTR_NAME {
            continue;
        }
        let cname = CString::new(name).expect("no NUL inside a listed name");
        match rustix::fs::fgetxattr(fd, cname.as_c_str(), &mut value) {
            Ok(k) => out.push((name.to_vec(), value[..k].to_vec())),
            // Larger than a stream carries.
            Err(rustix::io::Errno::RANGE) => skipped.push(String::from_utf8_lossy(name).into()),
            // Removed between the list and the read.
            Err(rustix::io::Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.sort();
    Ok((out, skipped))
}

/// Sets `attrs` on the open file or directory `fd`.
pub fn apply<F: AsFd>(fd: F, attrs: &[Attr]) -> io::Result<()> {
    for (name, value) in attrs {
        let cname = CString::new(name.as_slice())
            .map_err(|_| io::Error::other("NUL in an extended attribute name"))?;
        rustix::fs::fsetxattr(
            fd.as_fd(),
            cname.as_c_str(),
            value,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!(
                    "cannot set extended attribute {}: {}",
                    String::from_utf8_lossy(name),
                    io::Error::from(e)
                ),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_user_attributes_and_acls_travel() {
        assert!(copied(b"user.origin"));
        assert!(copied(b"system.posix_acl_access"));
        assert!(copied(b"system.posix_acl_default"));
        assert!(!copied(b"security.capability"));
        assert!(!copied(b"security.selinux"));
        assert!(!copied(b"trusted.overlay.opaque"));
        assert!(!copied(b"system.nfs4_acl"));
    }

    #[test]
    fn read_gives_back_what_apply_set() {
        let dir = std::env::temp_dir().join(format!("rdcp-xattr-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let f = std::fs::File::create(&dir).unwrap();
        let attrs = vec![
            (b"user.a".to_vec(), b"one".to_vec()),
            (b"user.b".to_vec(), vec![]),
            (b"user.c".to_vec(), vec![0, 1, 2, 255]),
        ];
        match apply(&f, &attrs) {
            Ok(()) => {
                let (got, skipped) = read(&f).unwrap();
                assert_eq!(got, attrs);
                assert!(skipped.is_empty());
            }
            // A temporary directory on a file system without user xattrs.
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
            Err(e) => panic!("{e}"),
        }
        std::fs::remove_file(&dir).unwrap();
    }
}
