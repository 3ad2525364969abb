//! Finding or installing the agent on one host, through whichever launcher
//! reaches it: the probe ([`super::probe::PROBE`]), then the `rdrecv` in
//! PATH, the cached copy or an upload ([`super::decide`]), each bounded in
//! time. Also `rdpipe doctor`'s way to the agent it probes with.

use super::{decide, probe, AgentBinary, AgentId, Choice, InstallError};
use crate::command_line::sh_line;
use crate::launcher::{Launcher, ShellOutput};
use rdpipe_plan::RemoteHost;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tracing::{debug, info};

/// The agent binary without self-install: `DIR/rdrecv` for `--remote-bin DIR`,
/// else `rdrecv` from PATH.
pub fn default_bin(remote_bin: Option<&str>) -> String {
    match remote_bin {
        Some(d) => format!("{}/rdrecv", d.trim_end_matches('/')),
        None => "rdrecv".to_string(),
    }
}

/// Runs `sh -c SCRIPT sh ARGS...` on the host (whatever its login shell
/// is), `input` on its stdin, within `limit`.
async fn remote_sh(
    launcher: &dyn Launcher,
    seg: usize,
    host: &RemoteHost,
    script: &str,
    args: &[&str],
    input: Option<Arc<Vec<u8>>>,
    limit: Duration,
) -> Result<ShellOutput, String> {
    let job = launcher.shell(seg, host, sh_line(script, args), input);
    match tokio::time::timeout(limit, job).await {
        Ok(r) => r.map_err(|e| e.cause.to_string()),
        Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
    }
}

/// Writes `input` (if any) to a child's stdin and closes it. A failed write
/// shows in the exit status and stderr.
pub(crate) async fn feed<W: tokio::io::AsyncWrite + Unpin>(
    input: Option<Arc<Vec<u8>>>,
    w: Option<W>,
) {
    if let (Some(data), Some(mut w)) = (input, w) {
        if w.write_all(&data).await.is_ok() {
            let _ = w.shutdown().await;
        }
    }
}

/// Finds or installs the agent on one host: the path to run (None: `rdrecv`
/// in PATH). Also `rdpipe doctor`'s way to the agent it probes with.
pub async fn prepare_host(
    launcher: Arc<dyn Launcher>,
    seg: usize,
    host: RemoteHost,
    bin: Arc<AgentBinary>,
    limit: Duration,
) -> Result<Option<String>, InstallError> {
    let t = Instant::now();
    let out = remote_sh(
        &*launcher,
        seg,
        &host,
        probe::PROBE,
        &["rdrecv", &bin.entry],
        None,
        limit,
    )
    .await
    .map_err(InstallError::Probe)?;
    debug!("{}: probed in {} ms", host.spec, t.elapsed().as_millis());
    after_probe(&*launcher, seg, &host, &bin, &out, limit).await
}

/// Finds or installs the agent on one host from its answer `out` to the
/// probe (that of [`prepare_host`], or of the fast path's session
/// ([`super::start`]) when the host had no agent it could run at once).
pub async fn after_probe(
    launcher: &dyn Launcher,
    seg: usize,
    host: &RemoteHost,
    bin: &AgentBinary,
    out: &ShellOutput,
    limit: Duration,
) -> Result<Option<String>, InstallError> {
    let p = probe::Probe::parse(&out.stdout).map_err(|e| {
        InstallError::Probe(match out.stderr.trim() {
            "" => e.to_string(),
            _ => format!("{e}; {}", out.why()),
        })
    })?;
    debug!("{}: the probe says {p:?}", host.spec);
    let dir = match decide(&p, bin)? {
        Choice::Installed => return Ok(None),
        Choice::Cached(dir) => {
            debug!("{}: using the cached agent in {dir}", host.spec);
            return Ok(Some(format!("{dir}/rdrecv")));
        }
        Choice::Upload(dir) => dir,
    };
    let why = match &p.path_agent {
        Some(id) => format!(
            "its rdrecv speaks agent protocol {} wire {}",
            id.protocol, id.wire
        ),
        None => "no usable rdrecv in PATH".to_string(),
    };
    info!(
        "{}: {why}; installing this rdpipe ({} bytes) into {dir}",
        host.spec, bin.size
    );
    let t = Instant::now();
    let bytes = bin.bytes().map_err(|message| InstallError::Upload {
        dir: dir.clone(),
        message,
    })?;
    let (sha, crc) = (&bin.sha256, bin.cksum());
    // Generous: 1 s per 256 KiB on top of the usual limit.
    let upload_limit = limit + Duration::from_secs(bin.size >> 18);
    let out = remote_sh(
        launcher,
        seg,
        host,
        probe::UPLOAD,
        &[&bin.entry, sha, crc],
        Some(bytes),
        upload_limit,
    )
    .await
    .map_err(|message| InstallError::Upload {
        dir: dir.clone(),
        message,
    })?;
    let mut lines = out.stdout.lines().map(str::trim);
    if lines.next() != Some("installed") {
        return Err(InstallError::Upload {
            dir,
            message: out.why(),
        });
    }
    match lines.next().unwrap_or("").parse::<AgentId>() {
        Ok(id) if id == AgentId::this() => {
            info!(
                "{}: installed into {dir} in {} ms",
                host.spec,
                t.elapsed().as_millis()
            );
            Ok(Some(format!("{dir}/rdrecv")))
        }
        _ => Err(InstallError::DoesNotRun {
            dir,
            message: out.why(),
        }),
    }
}
