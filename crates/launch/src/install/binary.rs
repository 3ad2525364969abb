//! The local binary that self-install puts on hosts (rdpipe itself: it is
//! also the agent), and what a run needs of it at once: its cache entry's
//! name (`<version>-<12 hex digits of its BLAKE3 hash>`) and its SHA-256.
//!
//! Hashing 9 MB costs about 20 ms of CPU at every start, on the cores the ssh
//! key exchanges need at that moment, for an answer that changes only with
//! the file. So the two hashes are remembered in
//! `${XDG_CACHE_HOME:-~/.cache}/rdma-pipe/self-sums` (one line, 0600, in a
//! directory of the user's), keyed by the file's device, inode, size and
//! modification and change times (a change time no user can set), and
//! computed again when any of these differ. The bytes themselves are read
//! only for an upload (and the glibc check before it), and checked against
//! the SHA-256 then: a file changed since is refused, not uploaded.

use super::cksum;
use super::elf::{self, GlibcVersion};
use super::VERSION;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// The local binary that is installed on hosts.
pub struct AgentBinary {
    /// Where it is read from when its bytes are needed.
    path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// The cache entry's name: `<version>-<12 hex digits of its BLAKE3 hash>`.
    pub entry: String,
    /// The architecture it is built for (`uname -m` spelling).
    pub arch: &'static str,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
    bytes: OnceLock<Result<Arc<Vec<u8>>, String>>,
    glibc: OnceLock<Option<GlibcVersion>>,
    crc: OnceLock<String>,
}

/// The identity of a file's contents as the file system keeps it: equal
/// keys, same bytes (short of root rewriting the disk under it).
fn file_key(m: &std::fs::Metadata) -> String {
    format!(
        "{} {} {} {}.{:09} {}.{:09}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

/// Where the remembered hashes live (none: no cache directory).
fn sums_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("rdma-pipe").join("self-sums"))
}

/// Whether `p` is this user's and writable by nobody else.
fn mine(p: &Path) -> bool {
    std::fs::metadata(p)
        .is_ok_and(|m| m.uid() == rustix::process::geteuid().as_raw() && m.mode() & 0o022 == 0)
}

/// The remembered `(entry, sha256)` for `key`, if the file holds them and
/// it and its directory are the user's alone (else another user could name
/// the entry a host runs).
fn remembered(file: &Path, key: &str) -> Option<(String, String)> {
    if !mine(file) || !file.parent().is_some_and(mine) {
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let line = text.lines().next()?;
    let rest = line.strip_prefix("v1 ")?.strip_prefix(key)?;
    let mut w = rest.split_whitespace();
    let (entry, sha) = (w.next()?, w.next()?);
    let ok = entry.starts_with(&format!("{VERSION}-"))
        && sha.len() == 64
        && sha.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| (entry.to_string(), sha.to_string()))
}

/// Writes the hashes for `key` (best effort: without it the next run hashes
/// again).
fn remember(file: &Path, key: &str, entry: &str, sha: &str) {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let Some(dir) = file.parent() else { return };
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    let tmp = dir.join(format!(".self-sums.{}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| writeln!(f, "v1 {key} {entry} {sha}"));
    if written.is_err() || std::fs::rename(&tmp, file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

impl AgentBinary {
    /// This binary at `exe`: its hashes remembered for this very file, else
    /// computed (blocking: some 20 ms for a binary of 9 MB).
    pub fn read(exe: &Path) -> io::Result<AgentBinary> {
        let m = std::fs::metadata(exe)?;
        let key = file_key(&m);
        let file = sums_file();
        if let Some((entry, sha256)) = file.as_deref().and_then(|f| remembered(f, &key)) {
            return Ok(AgentBinary::known(
                exe.to_path_buf(),
                m.size(),
                entry,
                sha256,
            ));
        }
        let bytes = std::fs::read(exe)?;
        let b = AgentBinary::of_bytes(exe.to_path_buf(), bytes);
        // Only if the file did not change while it was read.
        if std::fs::metadata(exe).is_ok_and(|n| file_key(&n) == key) {
            if let Some(f) = file {
                remember(&f, &key, &b.entry, &b.sha256);
            }
        }
        Ok(b)
    }

    fn known(path: PathBuf, size: u64, entry: String, sha256: String) -> AgentBinary {
        AgentBinary {
            path,
            size,
            entry,
            arch: std::env::consts::ARCH,
            sha256,
            bytes: OnceLock::new(),
            glibc: OnceLock::new(),
            crc: OnceLock::new(),
        }
    }

    fn of_bytes(path: PathBuf, bytes: Vec<u8>) -> AgentBinary {
        let hash = blake3::hash(&bytes).to_hex();
        let mut b = AgentBinary::known(
            path,
            bytes.len() as u64,
            format!("{VERSION}-{}", &hash.as_str()[..12]),
            cksum::sha256_hex(&bytes),
        );
        b.bytes = OnceLock::from(Ok(Arc::new(bytes)));
        b
    }

    /// The binary `bytes` (tests).
    pub fn of(bytes: Vec<u8>) -> AgentBinary {
        AgentBinary::of_bytes(PathBuf::new(), bytes)
    }

    /// Its bytes, read once (an upload), and only if they still are the
    /// binary whose SHA-256 this run announced.
    pub fn bytes(&self) -> Result<Arc<Vec<u8>>, String> {
        self.bytes
            .get_or_init(|| {
                let b = std::fs::read(&self.path)
                    .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
                if cksum::sha256_hex(&b) != self.sha256 {
                    return Err(format!(
                        "{} changed while rdpipe ran (a new build?): run again",
                        self.path.display()
                    ));
                }
                Ok(Arc::new(b))
            })
            .clone()
    }

    /// The glibc it needs, if any (from its bytes; none when they cannot
    /// be read, and the upload then says why).
    pub fn glibc(&self) -> Option<GlibcVersion> {
        *self
            .glibc
            .get_or_init(|| self.bytes().ok().and_then(|b| elf::glibc_needed(&b)))
    }

    /// The same binary, said to need `glibc` (tests).
    #[cfg(test)]
    pub(crate) fn with_glibc(self, glibc: Option<GlibcVersion>) -> AgentBinary {
        AgentBinary {
            glibc: OnceLock::from(glibc),
            ..self
        }
    }

    /// Its POSIX `cksum` (`CRC SIZE`), for a host with neither `openssl` nor
    /// `sha256sum`.
    pub fn cksum(&self) -> &str {
        self.crc.get_or_init(|| match self.bytes() {
            Ok(b) => cksum::posix_cksum(&b),
            Err(_) => String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_remembered_per_file_and_recomputed_when_it_changes() {
        let d = std::env::temp_dir().join(format!("rdpipe-self-sums-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let exe = d.join("bin");
        std::fs::write(&exe, b"first build").unwrap();
        let sums = d.join("cache/rdma-pipe/self-sums");
        let key = file_key(&std::fs::metadata(&exe).unwrap());
        assert_eq!(remembered(&sums, &key), None);
        let b = AgentBinary::of(b"first build".to_vec());
        remember(&sums, &key, &b.entry, &b.sha256);
        assert_eq!(
            remembered(&sums, &key),
            Some((b.entry.clone(), b.sha256.clone()))
        );
        // The same bytes written again: a new change time, a new key.
        std::fs::write(&exe, b"first build").unwrap();
        let key2 = file_key(&std::fs::metadata(&exe).unwrap());
        assert_ne!(key, key2);
        assert_eq!(remembered(&sums, &key2), None);
        // A line that is not ours is not believed.
        std::fs::write(&sums, format!("v1 {key} {} nothex\n", b.entry)).unwrap();
        assert_eq!(remembered(&sums, &key), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bytes_changed_since_the_hash_are_refused() {
        let d = std::env::temp_dir().join(format!("rdpipe-self-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let exe = d.join("bin");
        std::fs::write(&exe, b"old").unwrap();
        let b = AgentBinary::known(exe.clone(), 3, "e".into(), cksum::sha256_hex(b"old"));
        std::fs::write(&exe, b"new").unwrap();
        let e = b.bytes().unwrap_err();
        assert!(e.contains("changed while rdpipe ran"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
