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
//! SHA-256 (`openssl dgst`, 10 ms for 9 MB) the first time; it then leaves a
//! stamp beside the file (`stamp`: its inode, mode, size and change time as
//! GNU `ls -ldnLic` prints them), and later starts compare that instead. A
//! file written or replaced since has another change time or inode, which no
//! user can set back, so the stamp fails and the checksum decides again.
//! Anything else (no `openssl`, another binary, an unsafe cache, a shell
//! without `test -O`, an `ls` without `--time-style`) answers
//! [`super::probe::PROBE`] instead and ends; rdpipe then decides, installs
//! where needed, and starts the agent in a second session as before. rdpipe
//! sends nothing down the session before the mark, so no key reaches a
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
/// only add a refusal, never hide a mode. The stamp is compared word by word
/// with the last as many words of that listing (`ls` pads its columns to the
/// widest entry). What it runs gets no stdin until rdpipe has read the mark.
pub const START: &str = "n=$1; w=$2; v=$3; shift 3; \
if command -v rdrecv >/dev/null 2>&1; then \
case $(rdrecv --agent-protocol </dev/null 2>/dev/null) in \"$v \"*) echo rdpipe-agent-exec rdrecv; exec rdrecv \"$@\";; esac; fi; \
c=${XDG_CACHE_HOME:-$HOME/.cache}; e=$c/rdma-pipe/$n; b=$e/rdrecv; ok=; st=; \
l=\"ls -ldnLic --time-style=+%s.%N\"; \
if { [ -f \"$b\" ] && [ -x \"$b\" ] && [ -O \"$c\" ] && [ -O \"$c/rdma-pipe\" ] && [ -O \"$e\" ] && [ -O \"$b\" ]; } 2>/dev/null \
&& m=$(LC_ALL=C $l \"$c\" \"$c/rdma-pipe\" \"$e\" \"$b\" 2>/dev/null); then ok=1; set -f; \
for x in $m; do case $x in [-d]????w*|[-d]???????w*) ok=;; esac; done; set +f; fi; \
sw() { k=$#; st=\"$*\"; }; sl() { [ $# -ge $k ] && shift $(($# - k)); u=\"$*\"; }; \
if [ -n \"$ok\" ] && [ -f \"$e/stamp\" ] && IFS= read -r st <\"$e/stamp\" && [ -n \"$st\" ]; then \
set -f; sw $st; sl $m; set +f; \
if [ \"$u\" = \"$st\" ]; then echo \"rdpipe-agent-exec $b\"; exec \"$b\" \"$@\"; fi; fi; \
if [ -n \"$ok\" ] && command -v openssl >/dev/null 2>&1 && s=$(openssl dgst -sha256 <\"$b\" 2>/dev/null) \
&& [ \"${s##* }\" = \"$w\" ]; then \
s=$(LC_ALL=C $l \"$b\" 2>/dev/null) && echo \"$s\" >\"$e/.stamp.$$\" && mv -f \"$e/.stamp.$$\" \"$e/stamp\"; \
echo \"rdpipe-agent-exec $b\"; exec \"$b\" \"$@\"; fi; \
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
                if let Some(bin) = line
                    .strip_prefix(EXEC_MARK.as_bytes())
                    .and_then(|r| r.strip_prefix(b" "))
                {
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
    let (code, _) = h.wait.await;
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
                .env("XDG_CACHE_HOME", dir.path().join("cache"))
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

        let entry = dir.path().join("cache/rdma-pipe/v-1");
        std::fs::create_dir_all(&entry).unwrap();
        for d in [
            dir.path().join("cache"),
            dir.path().join("cache/rdma-pipe"),
            entry.clone(),
        ] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let bin = entry.join("rdrecv");
        std::fs::write(&bin, &agent).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ran = format!("{EXEC_MARK} {}\nagent --agent x y\n", bin.display());
        // Another binary's checksum: not run.
        assert!(probed(&run(&"0".repeat(64))));
        assert!(!entry.join("stamp").exists());
        // This one: checked, stamped, run; then run on the stamp.
        assert_eq!(run(&sha), ran);
        assert!(entry.join("stamp").exists());
        assert_eq!(
            run(&"0".repeat(64)),
            ran,
            "the stamp stands for the checksum"
        );
        // The file replaced (same size, other bytes): a new inode and change
        // time, so the stamp no longer holds, and the checksum decides.
        let other = b"#!/bin/sh\necho \"other $*\"\n".to_vec();
        let tmp = entry.join("new");
        std::fs::write(&tmp, &other).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, &bin).unwrap();
        assert!(probed(&run(&sha)));
        std::fs::write(&bin, &agent).unwrap();
        assert_eq!(run(&sha), ran);
        // A directory of the cache others may write: not run, stamp or not.
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
        assert_eq!(run(&sha), format!("{EXEC_MARK} rdrecv\npath --agent x y\n"));
        fake(&format!("{} {} 0.0.1", me.protocol + 1, me.wire));
        assert_eq!(run(&sha), ran);
    }
}
