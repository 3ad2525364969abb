//! What rdpipe asks a remote host before it starts agents there, and how it
//! installs its own binary: two POSIX `sh` scripts (run as `sh -c SCRIPT sh
//! ARGS...`, so they work whatever the user's login shell is; each is one line
//! without `'`, `\` or `!` for csh and fish), and the parser of the probe's
//! answer ([`Probe`]).

use super::elf::GlibcVersion;
use super::AgentId;

/// The probe. Arguments: the rdrecv to try (`rdrecv`, found in PATH), the cache
/// entry's name (`0.1.0-1a2b3c4d5e6f`). Prints `arch`, `libc`, `uid` (the
/// user's, `id -u`), `cache` (the entry's directory), `path` (what that
/// rdrecv says to `--agent-protocol`; no line when there is none), for each
/// of the cache's base directory, its `rdma-pipe` directory, the entry and
/// the cached binary that exists an `own NAME` line with its `ls -ldnL` (mode
/// and owner, symbolic links followed; one `ls` for all: each path is inside
/// the one before, so the ones that exist are the first few and `ls` lists
/// them in that order), `cached` (the size of the cached binary and what it
/// says) and `sum` (its SHA-256 from `openssl`, which uses the CPU's SHA
/// instructions, else `sha256sum`, else its POSIX `cksum`) when there is
/// one and every part of the cache is the user's alone (else the binary is
/// not run, not even for its answer: another user may have put it there;
/// [`super::decide`] refuses such a cache from the `own` lines), and `end`. Every program it runs gets no stdin and, where `timeout`
/// exists, 10 s. It runs in an agent's session that found no agent it could
/// run at once ([`super::start`]), so it forks as few programs as it can.
pub const PROBE: &str = "b=${XDG_CACHE_HOME:-$HOME/.cache}; c=$b/rdma-pipe/$2; \
t=; if command -v timeout >/dev/null 2>&1; then t=\"timeout 10\"; fi; \
echo \"arch $(uname -m 2>/dev/null)\"; \
echo \"libc $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>&1 | head -n 1)\"; \
echo \"uid $(id -u 2>/dev/null)\"; \
echo \"cache $c\"; \
if command -v \"$1\" >/dev/null 2>&1; then \
echo \"path $($t \"$1\" --agent-protocol </dev/null 2>/dev/null | head -n 1)\"; fi; \
set --; for p in \"$b\" \"$b/rdma-pipe\" \"$c\" \"$c/rdrecv\"; do [ -e \"$p\" ] && set -- \"$@\" \"$p\"; done; \
o=; safe=1; if [ $# -gt 0 ]; then o=$(LC_ALL=C ls -ldnL \"$@\" 2>/dev/null); \
[ -n \"$o\" ] && { printf %s \"$o\"; echo; } | \
{ for n in base pipe entry bin; do IFS= read -r l || break; echo \"own $n $l\"; done; }; \
set -f; for x in $o; do case $x in [-d]????w*|[-d]???????w*) safe=;; esac; done; set +f; \
for p in \"$@\"; do [ -O \"$p\" ] 2>/dev/null || safe=; done; fi; \
if [ -n \"$safe\" ] && [ -f \"$c/rdrecv\" ] && [ -x \"$c/rdrecv\" ]; then \
echo \"cached $(wc -c <\"$c/rdrecv\") $($t \"$c/rdrecv\" --agent-protocol </dev/null 2>/dev/null | head -n 1)\"; \
if command -v openssl >/dev/null 2>&1 && s=$($t openssl dgst -sha256 <\"$c/rdrecv\" 2>/dev/null); then echo \"sum sha256 ${s##* }\"; \
elif command -v sha256sum >/dev/null 2>&1; then s=$($t sha256sum <\"$c/rdrecv\"); echo \"sum sha256 ${s%% *}\"; \
else echo \"sum cksum $($t cksum <\"$c/rdrecv\")\"; fi; fi; \
echo end";

/// The upload. Arguments: the cache entry's name, the binary's SHA-256, its
/// POSIX `cksum` line. Reads the binary on stdin into a temporary file in the
/// entry's directory, checks it with `sha256sum` (or `cksum` where there is
/// none), makes it executable, renames it to `rdrecv` (atomic: a concurrent
/// run sees the whole file or none), prints `installed` and runs it with
/// `--agent-protocol`, whose answer is the next line. Exit 3: the checksum
/// differs. Directories it makes are its user's alone (umask 077).
pub const UPLOAD: &str = "d=${XDG_CACHE_HOME:-$HOME/.cache}/rdma-pipe/$1; \
(umask 077; mkdir -p \"$d\") || exit 1; t=\"$d/.rdrecv.tmp.$$\"; \
cat >\"$t\" || { rm -f \"$t\"; exit 1; }; \
if command -v sha256sum >/dev/null 2>&1; then s=$(sha256sum <\"$t\"); s=${s%% *}; w=$2; \
else s=$(cksum <\"$t\"); w=$3; fi; \
[ \"$s\" = \"$w\" ] || { rm -f \"$t\"; echo \"checksum $s, expected $w\" >&2; exit 3; }; \
chmod 755 \"$t\" && mv -f \"$t\" \"$d/rdrecv\" || { rm -f \"$t\"; exit 1; }; \
echo installed; \"$d/rdrecv\" --agent-protocol </dev/null";

/// The remote C library, as the probe saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteLibc {
    /// GNU libc of this version.
    Glibc(GlibcVersion),
    /// musl (Alpine and the like): a glibc binary does not run.
    Musl,
    /// Nothing recognisable (the probe's words, maybe empty).
    Unknown(String),
}

impl RemoteLibc {
    /// From `getconf GNU_LIBC_VERSION` (`glibc 2.36`) or the first line of
    /// `ldd --version` (`ldd (Debian GLIBC 2.36-9) 2.36`, `musl libc (x86_64)`).
    pub fn parse(s: &str) -> RemoteLibc {
        let s = s.trim();
        if let Some(v) = s.strip_prefix("glibc ").and_then(|v| v.trim().parse().ok()) {
            return RemoteLibc::Glibc(v);
        }
        let lower = s.to_ascii_lowercase();
        if lower.contains("musl") {
            return RemoteLibc::Musl;
        }
        if lower.contains("glibc") || lower.contains("gnu libc") {
            if let Some(v) = s.split_whitespace().last().and_then(|v| v.parse().ok()) {
                return RemoteLibc::Glibc(v);
            }
        }
        RemoteLibc::Unknown(s.to_string())
    }
}

/// A host's answer to [`PROBE`].
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// `uname -m`.
    pub arch: String,
    /// Its C library.
    pub libc: RemoteLibc,
    /// The cache entry's directory there (absolute).
    pub cache_dir: String,
    /// What the rdrecv in PATH said (None: missing, or not an agent that
    /// answers `--agent-protocol`).
    pub path_agent: Option<AgentId>,
    /// The cached binary: its size and what it said.
    pub cached: Option<(u64, Option<AgentId>)>,
    /// The cached binary's checksum, as the host computed it.
    pub cached_sum: Option<Sum>,
    /// The user there (`id -u`).
    pub uid: Option<u32>,
    /// The mode and owner of each part of the cache that exists.
    pub owners: Vec<Owner>,
}

/// A checksum the host computed of the cached binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sum {
    /// `sha256sum`'s hex digest.
    Sha256(String),
    /// POSIX `cksum`'s `CRC SIZE`.
    Cksum(String),
}

impl Sum {
    /// Whether this is the checksum of `bin`.
    pub fn matches(&self, bin: &super::AgentBinary) -> bool {
        match self {
            Sum::Sha256(h) => h.eq_ignore_ascii_case(&bin.sha256),
            Sum::Cksum(c) => c.split_whitespace().eq(bin.cksum().split_whitespace()),
        }
    }
}

/// Which part of the cache an [`Owner`] line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CachePart {
    /// `${XDG_CACHE_HOME:-~/.cache}`.
    Base,
    /// Its `rdma-pipe` directory.
    Pipe,
    /// This build's entry in it.
    Entry,
    /// The cached binary.
    Bin,
}

/// The mode and owner of one part of the cache, from `ls -ldnL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Which part.
    pub part: CachePart,
    /// `ls`'s mode string, e.g. `drwxr-xr-x`.
    pub mode: String,
    /// The owner's uid.
    pub uid: u32,
}

impl Owner {
    /// From `NAME MODE LINKS UID GID ...`.
    fn parse(v: &str) -> Option<Owner> {
        let mut w = v.split_whitespace();
        let part = match w.next()? {
            "base" => CachePart::Base,
            "pipe" => CachePart::Pipe,
            "entry" => CachePart::Entry,
            "bin" => CachePart::Bin,
            _ => return None,
        };
        let mode = w.next()?.to_string();
        let _links = w.next()?;
        let uid = w.next()?.parse().ok()?;
        (mode.len() >= 10).then_some(Owner { part, mode, uid })
    }

    /// Whether group or others may write it (`ls`'s 6th and 9th mode
    /// characters).
    pub fn writable_by_others(&self) -> bool {
        let m = self.mode.as_bytes();
        m[5] == b'w' || m[8] == b'w'
    }
}

/// Why a probe's answer is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeError {
    /// The script did not get to its end (`end`).
    #[error("the probe stopped early (it printed {0:?})")]
    Truncated(String),
    /// A line is missing.
    #[error("the probe's answer has no {0} line")]
    Missing(&'static str),
}

impl Probe {
    /// Parses the probe's stdout.
    pub fn parse(out: &str) -> Result<Probe, ProbeError> {
        let mut lines = out.lines();
        if !lines.any(|l| l == "end") {
            let first: String = out.chars().take(200).collect();
            return Err(ProbeError::Truncated(first));
        }
        let field = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ').or(Some("")))
                .map(str::trim)
        };
        let cached = field("cached").and_then(|v| {
            let (size, rest) = v.split_once(' ').unwrap_or((v, ""));
            Some((size.trim().parse().ok()?, rest.parse().ok()))
        });
        Ok(Probe {
            arch: field("arch")
                .ok_or(ProbeError::Missing("arch"))?
                .to_string(),
            libc: RemoteLibc::parse(field("libc").ok_or(ProbeError::Missing("libc"))?),
            cache_dir: field("cache")
                .filter(|c| c.starts_with('/'))
                .ok_or(ProbeError::Missing("cache"))?
                .to_string(),
            path_agent: field("path").and_then(|v| v.parse().ok()),
            cached,
            cached_sum: field("sum").and_then(|v| match v.split_once(' ')? {
                ("sha256", h) if !h.trim().is_empty() => Some(Sum::Sha256(h.trim().to_string())),
                ("cksum", c) if !c.trim().is_empty() => Some(Sum::Cksum(c.trim().to_string())),
                _ => None,
            }),
            uid: field("uid").and_then(|v| v.parse().ok()),
            owners: out
                .lines()
                .filter_map(|l| l.strip_prefix("own "))
                .filter_map(Owner::parse)
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_survive_csh_and_fish_quoting() {
        let start = super::super::start::script();
        for s in [PROBE, UPLOAD, start.as_str()] {
            assert!(!s.contains(['\'', '\\', '!', '\n']), "{s}");
        }
    }

    #[test]
    fn libc_lines() {
        let g = |a, b| RemoteLibc::Glibc(GlibcVersion { major: a, minor: b });
        assert_eq!(RemoteLibc::parse("glibc 2.36"), g(2, 36));
        assert_eq!(
            RemoteLibc::parse("ldd (Debian GLIBC 2.36-9+deb12u4) 2.36"),
            g(2, 36)
        );
        assert_eq!(RemoteLibc::parse("ldd (GNU libc) 2.17"), g(2, 17));
        assert_eq!(RemoteLibc::parse("musl libc (x86_64)"), RemoteLibc::Musl);
        assert_eq!(RemoteLibc::parse(""), RemoteLibc::Unknown(String::new()));
    }

    #[test]
    fn probe_answers() {
        let p = Probe::parse(
            "arch x86_64\nlibc glibc 2.31\nuid 1000\ncache /home/u/.cache/rdma-pipe/0.1.0-ab\n\
             path \nown base drwxr-xr-x 5 1000 1000 4096 Dec  1 18:00 /home/u/.cache\n\
             own bin -rwxrwxrwx 1 0 0 9 Dec  1 18:00 /x y/rdrecv\nown what -rw 1 2\n\
             cached 123 2 2 0.1.0\nsum sha256 ABCD\nend\n",
        )
        .unwrap();
        assert_eq!(p.uid, Some(1000));
        assert_eq!(p.cached_sum, Some(Sum::Sha256("ABCD".into())));
        assert_eq!(
            p.owners,
            [
                Owner {
                    part: CachePart::Base,
                    mode: "drwxr-xr-x".into(),
                    uid: 1000
                },
                Owner {
                    part: CachePart::Bin,
                    mode: "-rwxrwxrwx".into(),
                    uid: 0
                }
            ]
        );
        assert!(!p.owners[0].writable_by_others());
        assert!(p.owners[1].writable_by_others());
        assert_eq!(p.arch, "x86_64");
        assert_eq!(p.cache_dir, "/home/u/.cache/rdma-pipe/0.1.0-ab");
        assert_eq!(p.path_agent, None);
        let (size, id) = p.cached.clone().unwrap();
        assert_eq!(size, 123);
        assert_eq!(id, Some("2 2 0.1.0".parse().unwrap()));
        // An old agent that answers anything at all (`HELLO 1`) is not an id.
        let p = Probe::parse("arch x86_64\nlibc \ncache /r\npath HELLO 1\nend\n").unwrap();
        assert_eq!(p.path_agent, None);
        assert_eq!(p.cached, None);
        assert_eq!(p.libc, RemoteLibc::Unknown(String::new()));
        assert!(matches!(
            Probe::parse("arch x86_64\n"),
            Err(ProbeError::Truncated(_))
        ));
        assert_eq!(
            Probe::parse("arch x\nlibc glibc 2.3\ncache relative\nend\n"),
            Err(ProbeError::Missing("cache"))
        );
    }

    /// Both scripts run by the local `sh`, in a scratch cache: a probe finds
    /// nothing, an upload of a small agent-like script is checked and run, the
    /// next probe finds it cached; a corrupted upload leaves nothing behind.
    #[test]
    fn scripts_run_in_sh() {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let dir = tempfile::tempdir().unwrap();
        let sh = |script: &str, args: &[&str], input: &[u8]| {
            let mut c = Command::new("sh")
                .arg("-c")
                .arg(script)
                .arg("sh")
                .args(args)
                .env("XDG_CACHE_HOME", dir.path())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(input).unwrap();
            let o = c.wait_with_output().unwrap();
            (
                o.status.code(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
            )
        };
        let id = super::super::AgentId::this();
        let agent = format!("#!/bin/sh\necho '{id}'\n").into_bytes();
        let (sha, crc) = (
            super::super::cksum::sha256_hex(&agent),
            super::super::cksum::posix_cksum(&agent),
        );
        let (code, out) = sh(PROBE, &["/nonexistent/rdrecv", "v-1"], b"");
        assert_eq!(code, Some(0));
        let p = Probe::parse(&out).unwrap();
        let entry = dir.path().join("rdma-pipe/v-1");
        assert_eq!(p.cache_dir, entry.to_str().unwrap());
        assert_eq!((p.path_agent, p.cached), (None, None));

        let (code, out) = sh(UPLOAD, &["v-1", &"0".repeat(64), "1 2"], &agent);
        assert_eq!(code, Some(3), "{out}");
        assert_eq!(std::fs::read_dir(&entry).unwrap().count(), 0);

        let (code, out) = sh(UPLOAD, &["v-1", &sha, &crc], &agent);
        assert_eq!(code, Some(0));
        assert_eq!(out, format!("installed\n{id}\n"));
        // Without sha256sum in PATH, POSIX cksum checks the upload.
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        for tool in ["mkdir", "cat", "cksum", "chmod", "mv", "rm"] {
            let Some(p) = ["/usr/bin", "/bin"]
                .iter()
                .map(|d| std::path::Path::new(d).join(tool))
                .find(|p| p.exists())
            else {
                panic!("no {tool} in /usr/bin or /bin");
            };
            std::os::unix::fs::symlink(p, bin.join(tool)).unwrap();
        }
        let path = format!("PATH={}", bin.display());
        let script = format!("export {path}; {UPLOAD}");
        let (code, _) = sh(&script, &["v-2", &sha, "1 2"], &agent);
        assert_eq!(code, Some(3), "cksum is used, not sha256sum");
        let (code, out) = sh(&script, &["v-2", "not-used", &crc], &agent);
        assert_eq!((code, out), (Some(0), format!("installed\n{id}\n")));

        let (_, out) = sh(PROBE, &[entry.join("rdrecv").to_str().unwrap(), "v-1"], b"");
        let p = Probe::parse(&out).unwrap();
        assert_eq!(p.path_agent, Some(id.clone()));
        assert_eq!(p.cached, Some((agent.len() as u64, Some(id))));
        assert!(
            p.cached_sum
                .as_ref()
                .is_some_and(|s| s.matches(&super::super::AgentBinary::of(agent.clone()))),
            "{out}"
        );
        assert!(!p
            .cached_sum
            .unwrap()
            .matches(&super::super::AgentBinary::of(b"an impostor".to_vec())));
        let me = rustix::process::geteuid().as_raw();
        assert_eq!(p.uid, Some(me));
        let parts: Vec<CachePart> = p.owners.iter().map(|o| o.part).collect();
        assert_eq!(
            parts,
            [
                CachePart::Base,
                CachePart::Pipe,
                CachePart::Entry,
                CachePart::Bin
            ],
            "{out}"
        );
        assert!(p.owners.iter().all(|o| o.uid == me), "{out}");
        // The upload made its directories private.
        let o = p
            .owners
            .iter()
            .find(|o| o.part == CachePart::Entry)
            .unwrap();
        assert_eq!(o.mode, "drwx------", "{out}");
        assert!(!o.writable_by_others());
    }
}
