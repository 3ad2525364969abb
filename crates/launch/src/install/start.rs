//! Self-install's fast path: the agent's own session checks the host and
//! runs the agent, so a host that already has it costs one session, not a
//! probe session and then an agent session one after the other.
//!
//! The session runs [`START`] in place of the agent's binary. It runs, and
//! says so first with a [`EXEC_MARK`] line naming the binary, either the
//! `rdrecv` in PATH when that answers `--agent-protocol` with this build's
//! agent and wire protocols, or the cached agent when [`super::decide`]
//! would pick it: every part of the cache owned by the user and writable by
//! nobody else, and the file's SHA-256 (`openssl dgst`) this binary's.
//! Anything else (no `openssl`, another binary, an unsafe cache, a shell
//! without `test -O`) answers [`super::probe::PROBE`] instead and ends; rdpipe
//! then decides, installs where needed, and starts the agent in a second
//! session as before. rdpipe sends nothing down the session before the mark,
//! so no key reaches a binary the host did not check.

use crate::launcher::{AgentHandle, AgentProgram, ShellOutput};
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The line the fast path prints before it runs the agent, followed by a
/// space and the binary it runs.
pub const EXEC_MARK: &str = "rdpipe-agent-exec";

/// The fast path. Arguments: the cache entry's name, this binary's SHA-256,
/// `PROTOCOL WIRE` (this build's agent and wire protocols), then the agent's
/// arguments. One line without `'`, `\` or `!` (see [`super::probe`]). The
/// mode check word-splits `ls -ldnL`'s lines (globbing off) and refuses any
/// word shaped like a mode with group or other write permission: a file name
/// can only add a refusal, never hide a mode. What it runs gets no stdin
/// until rdpipe has read the mark.
pub const START: &str = "n=$1; w=$2; v=$3; shift 3; \
if command -v rdrecv >/dev/null 2>&1; then \
case $(rdrecv --agent-protocol </dev/null 2>/dev/null) in \"$v \"*) echo rdpipe-agent-exec rdrecv; exec rdrecv \"$@\";; esac; fi; \
c=${XDG_CACHE_HOME:-$HOME/.cache}; e=$c/rdma-pipe/$n; b=$e/rdrecv; ok=; st=; \
l=\"ls -ldnLic --time-style=+%s.%N\"; \
if { [ -f \"$b\" ] && [ -x \"$b\" ] && [ -O \"$c\" ] && [ -O \"$c/rdma-pipe\" ] && [ -O \"$e\" ] && [ -O \"$b\" ]; } 2>/dev/null \
&& m=$(LC_ALL=C $l \"$c\" \"$c/rdma-pipe\" \"$e\" \"$b\" 2>/dev/null); then ok=1; set -f; \
for x in $m; do case $x in [-d]????w*|[-d]???????w*) ok=;; esac; done; set +f; fi; \
if [ -n \"$ok\" ] && [ -f \"$e/stamp\" ] && IFS= read -r st <\"$e/stamp\" && [ -n \"$st\" ]; then \
case $m in *\"$st\") echo \"rdpipe-agent-exec $b\"; exec \"$b\" \"$@\";; esac; fi; \
if [ -n \"$ok\" ] && command -v openssl >/dev/null 2>&1 && s=$(openssl dgst -sha256 <\"$b\" 2>/dev/null) \
&& [ \"${s##* }\" = \"$w\" ]; then \
s=$(LC_ALL=C $l \"$b\" 2>/dev/null) && echo \"$s\" >\"$e/.stamp.$$\" && mv -f \"$e/.stamp.$$\" \"$e/stamp\"; \
echo \"rdpipe-agent-exec $b\"; exec \"$b\" \"$@\"; fi; \
set -- rdrecv \"$n\"; ";

/// The fast path's script with the probe after it: what the session runs.
pub fn script() -> String {
    format!("{START}{}", super::probe::PROBE)
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
        Err(_) => return Err(format!("no answer within {} s", limit.as_secs())),
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
