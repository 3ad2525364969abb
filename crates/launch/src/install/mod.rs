//! Self-install: rdpipe runs its own binary as the agent on hosts that have no
//! usable `rdrecv`. Only the machine you type on needs rdma-pipe installed.
//!
//! Each remote agent (unless `--no-install` or `--remote-bin`) starts on the
//! fast path ([`start`]): its own session runs the agent the host already
//! has, once the host checked it as below. Where it has none, that session
//! answers the probe ([`probe::PROBE`]) instead, through the host's launcher
//! (a session on its ssh master, or an srun job step): the
//! architecture, the C library, whether the `rdrecv` in PATH answers
//! `--agent-protocol` with this build's agent and wire protocols ([`AgentId`]),
//! and whether the per-build cache entry
//! `${XDG_CACHE_HOME:-~/.cache}/rdma-pipe/<version>-<hash>/rdrecv` already holds
//! this binary. [`decide`] then picks the `rdrecv` in PATH, the cached copy, or
//! an upload, or says why this binary cannot run there and what to install
//! ([`InstallError`]). The upload ([`probe::UPLOAD`]) streams the binary over
//! the same channel, checks its SHA-256 (`sha256sum`) or POSIX `cksum` there,
//! renames it into place and runs it once. `<hash>` is the first 12 hex digits
//! of the binary's BLAKE3 hash, and entries are only made by that rename after
//! the check. A later run reuses the cached binary only when the host's
//! SHA-256 of it (or its `cksum` where there is no `sha256sum`; on the fast
//! path, the mark a checksum left for the file as it is) is this binary's,
//! and only from a cache that is the user's alone: the base
//! directory, `rdma-pipe/`, the entry and the binary owned by the user and
//! writable by nobody else. Anything else there could swap the binary, which
//! gets the hop keys on its stdin ([`InstallError::UnsafeCache`] says which
//! and how to fix it); a binary that is not this one is uploaded over.
//!
//! - [`binary`]: the local binary, its hashes remembered per file;
//! - [`elf`]: the glibc version a binary needs (its `GLIBC_x.y` version needs);
//! - [`cksum`]: POSIX `cksum` and SHA-256;
//! - [`probe`]: the remote scripts and the probe's answer;
//! - [`start`]: the fast path, a host that has the agent runs it in the
//!   agent's own session.

mod binary;
pub mod cksum;
pub mod elf;
mod host;
pub mod probe;
pub mod start;

pub use binary::AgentBinary;
pub(crate) use host::feed;
pub use host::{after_probe, default_bin, prepare_host};

use elf::GlibcVersion;
use probe::{CachePart, Probe, RemoteLibc};

use std::path::Path;

pub use rdpipe_control::{AgentId, VERSION};

/// What to run on a host.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// The `rdrecv` in PATH speaks our protocols.
    Installed,
    /// The cache entry holds this binary: run it from there.
    Cached(String),
    /// Upload this binary into the cache entry's directory, then run it there.
    Upload(String),
}

/// Why this rdpipe cannot run its agent on a host; each says what to install.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InstallError {
    /// Another architecture.
    #[error(
        "no usable rdrecv there, and it is {remote} while this rdpipe is built for {local}: \
         install rdma-pipe for {remote} there (rdrecv in PATH, or pass --remote-bin DIR)"
    )]
    Arch {
        /// `uname -m` there.
        remote: String,
        /// This build's.
        local: String,
    },
    /// No glibc (musl), while this binary needs it.
    #[error(
        "no usable rdrecv there, and it has no GNU C library ({libc}) while this rdpipe needs \
         glibc {need} or later: install rdma-pipe built for that system there (rdrecv in \
         PATH, or pass --remote-bin DIR)"
    )]
    NoGlibc {
        /// What the probe saw.
        libc: String,
        /// What the binary needs.
        need: GlibcVersion,
    },
    /// A glibc older than the binary needs.
    #[error(
        "no usable rdrecv there, and it has glibc {have} while this rdpipe needs glibc {need} \
         or later: install rdma-pipe there (rdrecv in PATH, or pass --remote-bin DIR), or \
         use an rdpipe built against glibc {have} or older"
    )]
    OldGlibc {
        /// The host's.
        have: GlibcVersion,
        /// What the binary needs.
        need: GlibcVersion,
    },
    /// A part of the cache can be changed by someone else.
    #[error(
        "will not run an agent from {path} there: it {why}, so another user could swap the \
         binary that gets the hop keys; {fix}, or pass --remote-bin DIR or --no-install"
    )]
    UnsafeCache {
        /// The directory or file.
        path: String,
        /// What is wrong with it.
        why: String,
        /// What to do about it.
        fix: String,
    },
    /// The probe failed.
    #[error("cannot check for rdrecv there: {0}")]
    Probe(String),
    /// The upload failed.
    #[error("cannot install rdrecv into {dir} there: {message}")]
    Upload {
        /// The cache entry's directory.
        dir: String,
        /// What failed.
        message: String,
    },
    /// The uploaded binary does not run there.
    #[error(
        "rdrecv installed into {dir} does not run there ({message}): install rdma-pipe there \
         (rdrecv in PATH, or pass --remote-bin DIR)"
    )]
    DoesNotRun {
        /// The cache entry's directory.
        dir: String,
        /// Its output, or how it ended.
        message: String,
    },
}

/// `uname -m` spellings of the same architecture.
fn same_arch(local: &str, remote: &str) -> bool {
    fn norm(a: &str) -> &str {
        match a {
            "arm64" => "aarch64",
            "amd64" => "x86_64",
            "ppc64le" | "ppc64" => "powerpc64",
            other => other,
        }
    }
    norm(local) == norm(remote)
}

/// Refuses a cache that someone else owns or may write (see the module doc).
fn check_cache(p: &Probe) -> Result<(), InstallError> {
    let entry = Path::new(&p.cache_dir);
    let pipe = entry.parent().unwrap_or(entry);
    let base = pipe.parent().unwrap_or(pipe);
    for o in &p.owners {
        let path = match o.part {
            CachePart::Base => base.to_path_buf(),
            CachePart::Pipe => pipe.to_path_buf(),
            CachePart::Entry => entry.to_path_buf(),
            CachePart::Bin => entry.join("rdrecv"),
        }
        .display()
        .to_string();
        if let Some(me) = p.uid.filter(|me| *me != o.uid) {
            return Err(InstallError::UnsafeCache {
                fix: format!("remove it or make it yours (chown {me} {path})"),
                why: format!("is owned by uid {}, not by you (uid {me})", o.uid),
                path,
            });
        }
        if o.writable_by_others() {
            return Err(InstallError::UnsafeCache {
                fix: format!("run chmod go-w {path} there"),
                why: format!("can be written by group or others ({})", o.mode),
                path,
            });
        }
    }
    Ok(())
}

/// What to run on a host, from its probe.
pub fn decide(p: &Probe, bin: &AgentBinary) -> Result<Choice, InstallError> {
    if p.path_agent.as_ref().is_some_and(AgentId::compatible) {
        return Ok(Choice::Installed);
    }
    check_cache(p)?;
    let this = AgentId::this();
    if let Some((size, Some(id))) = &p.cached {
        let same = p.cached_sum.as_ref().is_some_and(|s| s.matches(bin));
        if *size == bin.size && *id == this && same {
            return Ok(Choice::Cached(p.cache_dir.clone()));
        }
    }
    if !same_arch(bin.arch, &p.arch) {
        return Err(InstallError::Arch {
            remote: p.arch.clone(),
            local: bin.arch.to_string(),
        });
    }
    if let Some(need) = bin.glibc() {
        match &p.libc {
            RemoteLibc::Glibc(have) if *have < need => {
                return Err(InstallError::OldGlibc { have: *have, need })
            }
            RemoteLibc::Musl => {
                return Err(InstallError::NoGlibc {
                    libc: "musl".into(),
                    need,
                })
            }
            // Unknown: try; the first run of the upload tells.
            _ => {}
        }
    }
    Ok(Choice::Upload(p.cache_dir.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(glibc: Option<(u32, u32)>) -> AgentBinary {
        let mut b = AgentBinary::of(vec![0; 100]);
        b.arch = "x86_64";
        b.with_glibc(glibc.map(|(major, minor)| GlibcVersion { major, minor }))
    }

    fn probe(arch: &str, libc: &str) -> Probe {
        Probe {
            arch: arch.into(),
            libc: RemoteLibc::parse(libc),
            cache_dir: "/c".into(),
            path_agent: None,
            cached: None,
            cached_sum: None,
            uid: Some(1000),
            owners: Vec::new(),
        }
    }

    #[test]
    fn agent_ids() {
        let me = AgentId::this();
        assert_eq!(me.to_string().parse::<AgentId>(), Ok(me.clone()));
        assert!(me.compatible());
        let mut other = me.clone();
        other.version = "9.9.9".into();
        assert!(other.compatible());
        other.protocol += 1;
        assert!(!other.compatible());
        for bad in [
            "",
            "HELLO 1",
            "2 2",
            "2 2 0.1.0 extra",
            "rdrecv: unexpected argument",
        ] {
            assert!(bad.parse::<AgentId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn decisions() {
        let b = bin(Some((2, 34)));
        let mut p = probe("x86_64", "glibc 2.36");
        assert_eq!(decide(&p, &b), Ok(Choice::Upload("/c".into())));
        // A cached copy of another size, or that says another id: upload again.
        p.cached = Some((99, Some(AgentId::this())));
        assert_eq!(decide(&p, &b), Ok(Choice::Upload("/c".into())));
        p.cached = Some((100, None));
        assert_eq!(decide(&p, &b), Ok(Choice::Upload("/c".into())));
        p.cached = Some((100, Some(AgentId::this())));
        // The same size and answer, but not this binary (or no checksum):
        // an impostor, uploaded over.
        assert_eq!(decide(&p, &b), Ok(Choice::Upload("/c".into())));
        p.cached_sum = Some(probe::Sum::Sha256("0".repeat(64)));
        assert_eq!(decide(&p, &b), Ok(Choice::Upload("/c".into())));
        p.cached_sum = Some(probe::Sum::Sha256(cksum::sha256_hex(&b.bytes().unwrap())));
        assert_eq!(decide(&p, &b), Ok(Choice::Cached("/c".into())));
        p.cached_sum = Some(probe::Sum::Cksum(cksum::posix_cksum(&b.bytes().unwrap())));
        assert_eq!(decide(&p, &b), Ok(Choice::Cached("/c".into())));
        p.path_agent = Some(AgentId::this());
        assert_eq!(decide(&p, &b), Ok(Choice::Installed));
        let mut old = AgentId::this();
        old.protocol = 1;
        p.path_agent = Some(old);
        assert_eq!(decide(&p, &b), Ok(Choice::Cached("/c".into())));

        assert_eq!(
            decide(&probe("aarch64", "glibc 2.36"), &b),
            Err(InstallError::Arch {
                remote: "aarch64".into(),
                local: "x86_64".into()
            })
        );
        assert!(decide(&probe("amd64", "glibc 2.36"), &b).is_ok());
        let e = decide(&probe("x86_64", "glibc 2.17"), &b).unwrap_err();
        assert!(matches!(e, InstallError::OldGlibc { .. }));
        assert!(
            e.to_string()
                .contains("glibc 2.17 while this rdpipe needs glibc 2.34"),
            "{e}"
        );
        assert!(matches!(
            decide(&probe("x86_64", "musl libc (x86_64)"), &b),
            Err(InstallError::NoGlibc { .. })
        ));
        // A cache another user owns or may write is refused, naming the
        // part and the fix.
        let own = |part, mode: &str, uid| probe::Owner {
            part,
            mode: mode.into(),
            uid,
        };
        let mut p = probe("x86_64", "glibc 2.36");
        p.cache_dir = "/h/.cache/rdma-pipe/v-1".into();
        p.owners = vec![own(CachePart::Base, "drwx------", 1000)];
        assert!(decide(&p, &b).is_ok());
        p.owners.push(own(CachePart::Pipe, "drwxrwxr-x", 1000));
        let e = decide(&p, &b).unwrap_err();
        assert_eq!(
            e.to_string(),
            "will not run an agent from /h/.cache/rdma-pipe there: it can be written by group \
             or others (drwxrwxr-x), so another user could swap the binary that gets the hop \
             keys; run chmod go-w /h/.cache/rdma-pipe there, or pass --remote-bin DIR or \
             --no-install"
        );
        p.owners = vec![own(CachePart::Bin, "-rwxr-xr-x", 0)];
        let e = decide(&p, &b).unwrap_err().to_string();
        assert!(
            e.contains("/h/.cache/rdma-pipe/v-1/rdrecv there: it is owned by uid 0, not by you"),
            "{e}"
        );
        p.path_agent = Some(AgentId::this());
        assert_eq!(
            decide(&p, &b),
            Ok(Choice::Installed),
            "the cache is not used"
        );

        // Unknown libc: try. A static build needs none.
        assert!(decide(&probe("x86_64", ""), &b).is_ok());
        assert!(decide(&probe("x86_64", "musl libc"), &bin(None)).is_ok());
    }
}
