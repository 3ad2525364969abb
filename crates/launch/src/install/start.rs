//! Self-install's fast path: the agent's own session checks the host and
//! runs the agent, so a host that already has it costs one session, not a
//! probe session and then an agent session one after the other.
//!
//! The session runs [`START`] in place of the agent's binary. It runs, and
//! says so first with a [`EXEC_MARK`] line naming the binary, either the
//! `rdrecv` in PATH when that answers `--agent-protocol` with this build's
//! agent and wire protocols, or the cached agent when [`super::decide`]
//! would pick it: every part of the cache owned by the user and writable by
//! nobody else, and the file this binary. That last check is the file's
//! SHA-256 (`openssl dgst`, 10 ms for 9 MB) the first time; it then leaves
//! a mark in the entry, an empty file named `.ok-INODE-SIZE-CTIME` after
//! the file as listed before the checksum (GNU `ls -ldnLic`, change time in
//! nanoseconds), and later starts look for the mark of the file as it is
//! now. Only the user can make a file in the entry (it is checked to be
//! theirs alone), so the mark's contents and mode do not matter; writing or
//! replacing the agent gives it another change time or inode, which no user
//! can set back, so any change falls back to the checksum. Anything else (no
//! `openssl`, another binary, an unsafe cache, a path with a control
//! character, a shell without `test -O`, an `ls` without `--time-style`)
//! answers [`super::probe::PROBE`] instead and ends; rdpipe then decides,
//! installs where needed, and starts the agent in a second session. rdpipe
//! sends nothing down the session before the mark line, so no key reaches a
//! binary the host did not check.

use crate::launcher::{AgentHandle, AgentProgram, ShellOutput};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The line the fast path prints before it runs the agent, followed by a
/// space and the binary it runs.
pub const EXEC_MARK: &str = "rdpipe-agent-exec";

/// The fast path. Arguments: the cache entry's name, this binary's SHA-256,
/// `PROTOCOL WIRE` (this build's agent and wire protocols), then the agent's
/// arguments. One line without `'`, `\` or `!` (see [`super::probe`]). The
/// mode check word-splits `ls`'s lines (globbing off) and refuses any word
/// shaped like a mode with group or other write permission: a file name can
/// only add a refusal, never hide a mode. The agent's line is the listing's
/// last (GNU `ls` lists its operands by name, each here inside the one
/// before): its last 7 + (words of its path) words. The mark line is printed
/// with `printf %s` (no escapes read in the path), after an empty line (a
/// login script's output without a newline cannot run into it). What runs
/// gets no stdin until rdpipe has read the mark line.
pub const START: &str = "n=$1; w=$2; v=$3; shift 3; t=; \
if command -v timeout >/dev/null 2>&1; then t=\"timeout 10\"; fi; \
if command -v rdrecv >/dev/null 2>&1; then \
case $($t rdrecv --agent-protocol </dev/null 2>/dev/null) in \"$v \"*) \
echo; printf %s \"rdpipe-agent-exec rdrecv\"; echo; exec rdrecv \"$@\";; esac; fi; \
c=${XDG_CACHE_HOME:-$HOME/.cache}; e=$c/rdma-pipe/$n; b=$e/rdrecv; ok=; u=; \
case $b in *[[:cntrl:]]*) ;; *) \
if { [ -f \"$b\" ] && [ -x \"$b\" ] && [ -O \"$c\" ] && [ -O \"$c/rdma-pipe\" ] && [ -O \"$e\" ] && [ -O \"$b\" ]; } 2>/dev/null \
&& m=$(LC_ALL=C ls -ldnLic --time-style=+%s.%N \"$c\" \"$c/rdma-pipe\" \"$e\" \"$b\" 2>/dev/null); then ok=1; set -f; \
for x in $m; do case $x in [-d]????w*|[-d]???????w*) ok=;; esac; done; \
sw() { k=$#; }; sl() { [ $# -ge $k ] && shift $(($# - k)) && u=$1-$6-$7; }; sw $b; k=$((k + 7)); sl $m; set +f; \
case $u in */*|\"\") ok=;; esac; fi;; esac; \
if [ -n \"$ok\" ] && [ -e \"$e/.ok-$u\" ]; then \
echo; printf %s \"rdpipe-agent-exec $b\"; echo; exec \"$b\" \"$@\"; fi; \
if [ -n \"$ok\" ] && command -v openssl >/dev/null 2>&1 && s=$($t openssl dgst -sha256 <\"$b\" 2>/dev/null) \
&& [ \"${s##* }\" = \"$w\" ]; then { rm -f \"$e\"/.ok-*; : >\"$e/.ok-$u\"; } 2>/dev/null; \
echo; printf %s \"rdpipe-agent-exec $b\"; echo; exec \"$b\" \"$@\"; fi; \
set -- rdrecv \"$n\"; ";

/// The fast path's script with the probe after it: what the session runs.
pub fn script() -> String {
    format!("{START}{}", super::probe::PROBE)
}

/// The remote shell's command line that runs `program` with `args`: the
/// binary itself, or self-install's fast path (`sh -c START sh ENTRY SHA256
/// 'PROTOCOL WIRE' ARGS...`, this module).
pub fn agent_command_line(
    program: &AgentProgram,
    args: &[String],
    env: &[(String, String)],
) -> String {
    match program {
        AgentProgram::Bin(bin) => crate::command_line::remote_command_line(bin, args, env),
        AgentProgram::Checked { entry, sha256, .. } => {
            let me = rdpipe_control::AgentId::this();
            let mut words = vec![
                "-c".to_string(),
                script(),
                "sh".into(),
                entry.clone(),
                sha256.clone(),
                format!("{} {}", me.protocol, me.wire),
            ];
            words.extend(args.iter().cloned());
            crate::command_line::remote_command_line("sh", &words, env)
        }
    }
}

/// What the session did.
pub enum Started {
    /// It runs the agent: this binary (`rdrecv`, or the cached agent's
    /// path there), and its channel.
    Agent(String, AgentHandle),
    /// It answered the probe instead, and ended.
    Probed(ShellOutput),
}

/// The most the session may print before its mark or instead of it (a
/// login script's words, the probe's answer).
const MAX_ANSWER: usize = 64 << 10;

/// What a launcher's session for `program` did: for the fast path, its
/// first words read (see [`read_mark`]); else the agent runs.
pub async fn settle(program: &AgentProgram, h: AgentHandle) -> Result<Started, String> {
    match program {
        AgentProgram::Bin(bin) => Ok(Started::Agent(bin.clone(), h)),
        AgentProgram::Checked { limit, .. } => read_mark(h, *limit).await,
    }
}

/// Reads the session's first words, within `limit`: its mark (the agent
/// now runs, and gets `h` back) or its whole answer to the probe.
async fn read_mark(mut h: AgentHandle, limit: Duration) -> Result<Started, String> {
    let mark = format!("{EXEC_MARK} ");
    let read = async {
        let mut out = Vec::new();
        // A byte at a time: nothing after the mark may be taken from the
        // agent's channel.
        let mut b = [0u8; 1];
        loop {
            let n = h.stdout.read(&mut b).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok::<_, String>((out, false));
            }
            out.push(b[0]);
            if b[0] == b'\n' {
                let line = out[..out.len() - 1]
                    .rsplit(|&c| c == b'\n')
                    .next()
                    .unwrap_or_default();
                let at = line.windows(mark.len()).position(|w| w == mark.as_bytes());
                if let Some(bin) = at.map(|i| &line[i + mark.len()..]) {
                    let bin = String::from_utf8_lossy(bin).into_owned();
                    return Ok((bin.into_bytes(), true));
                }
            }
            if out.len() > MAX_ANSWER {
                return Err(format!(
                    "the session printed over {} KiB without starting the agent or answering \
                     the probe (a login script's output?)",
                    MAX_ANSWER >> 10
                ));
            }
        }
    };
    let (out, started) = match tokio::time::timeout(limit, read).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(format!(
                "the agent's start did not answer within {} s (a login script waiting for \
                 input, or an rdrecv in PATH that hangs?)",
                limit.as_secs()
            ))
        }
    };
    if started {
        return Ok(Started::Agent(
            String::from_utf8_lossy(&out).into_owned(),
            h,
        ));
    }
    let mut err = Vec::new();
    if let Some(mut e) = h.stderr.take() {
        let _ = tokio::time::timeout(limit, e.read_to_end(&mut err)).await;
    }
    let code = match tokio::time::timeout(limit, h.wait).await {
        Ok((code, _)) => code,
        Err(_) => None,
    };
    Ok(Started::Probed(ShellOutput {
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// The fast path run by the local `sh` in a scratch cache, with a small
    /// agent-like script as the binary: what it runs, when, and when it
    /// answers the probe instead.
    #[test]
    fn the_fast_path_runs_only_a_checked_agent() {
        // The fast path checks with `openssl dgst` (scripts/install-deps).
        if Command::new("openssl").arg("version").output().is_err() {
            let why = "the_fast_path_runs_only_a_checked_agent: no openssl here";
            assert!(
                std::env::var("RDPIPE_REQUIRE_ALL").as_deref() != Ok("1"),
                "{why} (RDPIPE_REQUIRE_ALL=1)"
            );
            eprintln!("SKIPPED: {why}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let me = rdpipe_control::AgentId::this();
        let proto = format!("{} {}", me.protocol, me.wire);
        let agent = b"#!/bin/sh\necho \"agent $*\"\n".to_vec();
        let sha = super::super::cksum::sha256_hex(&agent);
        let path_dir = dir.path().join("path");
        std::fs::create_dir(&path_dir).unwrap();
        let run = |sha: &str| {
            let o = Command::new("sh")
                .arg("-c")
                .arg(script())
                .args(["sh", "v-1", sha, &proto, "--agent", "x y"])
                .env("XDG_CACHE_HOME", dir.path().join("ca che"))
                .env("PATH", format!("{}:/usr/bin:/bin", path_dir.display()))
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).into_owned()
        };
        let probed = |out: &str| {
            out.lines().next().is_some_and(|l| l.starts_with("arch ")) && out.ends_with("end\n")
        };
        // No cache: the probe's answer.
        let out = run(&sha);
        assert!(probed(&out), "{out}");

        let entry = dir.path().join("ca che/rdma-pipe/v-1");
        std::fs::create_dir_all(&entry).unwrap();
        for d in [
            dir.path().join("ca che"),
            dir.path().join("ca che/rdma-pipe"),
            entry.clone(),
        ] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let bin = entry.join("rdrecv");
        std::fs::write(&bin, &agent).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ran = format!("\n{EXEC_MARK} {}\nagent --agent x y\n", bin.display());
        // Another binary's checksum: not run.
        assert!(probed(&run(&"0".repeat(64))));
        let marks = || {
            std::fs::read_dir(&entry)
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .starts_with(".ok-")
                })
                .count()
        };
        assert_eq!(marks(), 0);
        // This one: checked, marked, run; then run on the mark.
        assert_eq!(run(&sha), ran);
        assert_eq!(marks(), 1);
        assert_eq!(
            run(&"0".repeat(64)),
            ran,
            "the mark stands for the checksum"
        );
        // The file replaced (same size, other bytes): a new inode and change
        // time, so the mark no longer holds, and the checksum decides.
        let other = b"#!/bin/sh\necho \"other $*\"\n".to_vec();
        let tmp = entry.join("new");
        std::fs::write(&tmp, &other).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
        assert!(probed(&run(&sha)));
        std::fs::write(&bin, &agent).unwrap();
        assert_eq!(run(&sha), ran);
        // A directory of the cache others may write: not run, mark or not.
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o770)).unwrap();
        assert!(probed(&run(&sha)));
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o757)).unwrap();
        assert!(probed(&run(&sha)));
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(run(&sha), ran);
        // An rdrecv in PATH that speaks this protocol comes first; one that
        // speaks another does not.
        let rdrecv = path_dir.join("rdrecv");
        let fake = |answer: &str| {
            std::fs::write(
                &rdrecv,
                format!(
                    "#!/bin/sh\n[ \"$1\" = --agent-protocol ] && {{ echo '{answer}'; exit; }}\necho \"path $*\"\n"
                ),
            )
            .unwrap();
            std::fs::set_permissions(&rdrecv, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        fake(&me.to_string());
        assert_eq!(
            run(&sha),
            format!("\n{EXEC_MARK} rdrecv\npath --agent x y\n")
        );
        fake(&format!("{} {} 0.0.1", me.protocol + 1, me.wire));
        assert_eq!(run(&sha), ran);
    }
}
