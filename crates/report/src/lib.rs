//! Machine-readable run reports (`--json FILE`): the JSON shapes of an endpoint's
//! transfer (rdsend, rdrecv) and of a pipeline (rdpipe: hops, segments,
//! verdict), and the one way they reach the disk: a temporary file beside the
//! target, renamed over it once complete, so a reader never sees half a report.

use rdpipe_wire::Integrity;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// The version written in every report (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the JSON report {path}: {source}")]
pub struct ReportError {
    /// The report's path.
    pub path: String,
    /// What failed.
    #[source]
    pub source: std::io::Error,
}

/// Writes `value` as pretty JSON to `path`: into a temporary file in the same
/// directory, flushed to disk, then renamed over `path`.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), ReportError> {
    let err = |source| ReportError {
        path: path.display().to_string(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.as_deref().unwrap_or("report")))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(err)?;
    serde_json::to_writer_pretty(&mut tmp, value).map_err(|e| err(e.into()))?;
    tmp.write_all(b"\n").map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// A transport description as `-v` shows it (`tcp`, `rdma (rxe0, write-with-imm)`)
/// split into the transport's name and its device: `("rdma", Some("rxe0"))`.
pub fn transport_parts(describe: &str) -> (String, Option<String>) {
    match describe.split_once(" (") {
        Some((kind, rest)) => {
            let inner = rest.trim_end_matches(')');
            let device = inner.split(',').next().map(str::trim).unwrap_or("");
            (
                kind.to_string(),
                (!device.is_empty()).then(|| device.to_string()),
            )
        }
        None => (describe.to_string(), None),
    }
}

/// Bytes per second, 0 for a transfer that took no measurable time.
pub fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 / secs
    } else {
        0.0
    }
}

/// Which end of a transfer an endpoint report describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// rdsend.
    Sender,
    /// rdrecv.
    Receiver,
}

/// One transfer as it went, for reports: absent fields were never learnt
/// (a transfer that failed before its data phase).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Transfer {
    /// `tcp` or `rdma`.
    pub transport: Option<String>,
    /// The RDMA device (`rxe0`), for RDMA.
    pub device: Option<String>,
    /// As `-v` says it: `rdma (rxe0, write-with-imm)`.
    pub transport_detail: Option<String>,
    /// How the stream was protected: `checksum`, `mac` or `encrypt`.
    pub integrity: Option<String>,
    /// Bytes carried, verified end to end.
    pub bytes: Option<u64>,
    /// xxh3-64 of the stream, 16 hex digits.
    pub checksum: Option<String>,
    /// Seconds the data phase took.
    pub seconds: Option<f64>,
    /// Bytes per second over the data phase.
    pub rate_bytes_per_second: Option<f64>,
    /// Each time the hop's connection died and the stream resumed on a new
    /// one (`--reconnect-timeout`), in order.
    pub reconnects: Vec<ReconnectReport>,
    /// What `--compress` did; absent when the transfer was not compressed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compress: Option<CompressReport>,
}

/// What compression did on a transfer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompressReport {
    /// `auto` or `zstd:LEVEL`.
    pub mode: String,
    /// The lowest and highest zstd level a chunk was compressed at (the
    /// sender's report; absent on a receiver's, and when no chunk shrank).
    pub level_min: Option<i32>,
    /// See `level_min`.
    pub level_max: Option<i32>,
    /// Bytes before compression (the stream).
    pub bytes_before: u64,
    /// Bytes after (the chunks on the wire with their 5-byte trailers,
    /// before sealing).
    pub bytes_after: u64,
    /// `bytes_before / bytes_after`.
    pub ratio: f64,
}

impl CompressReport {
    /// The report of a hop's compression summary.
    pub fn of(c: &rdpipe_control::CompressSummary) -> CompressReport {
        CompressReport {
            mode: c.mode.to_string(),
            level_min: c.levels.map(|l| l.0),
            level_max: c.levels.map(|l| l.1),
            bytes_before: c.raw,
            bytes_after: c.wire,
            ratio: c.ratio(),
        }
    }
}

/// One re-attach of an agent whose control channel (its ssh session) was
/// lost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReattachReport {
    /// The agent's host, as written.
    pub host: String,
    /// Its segment (1-based).
    pub segment: usize,
    /// Seconds from the loss to the agent answering on the new channel.
    pub downtime_seconds: f64,
    /// How the channel was lost (ssh's or the session's words).
    pub lost: String,
}

/// One reconnect of a hop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReconnectReport {
    /// The stream offset it resumed at (bytes the receiver held).
    pub offset: u64,
    /// Seconds from the loss to the stream flowing again.
    pub downtime_seconds: f64,
    /// The new connection's transport, as `-v` says it.
    pub transport: String,
}

impl ReconnectReport {
    /// The report of a transport-level reconnect.
    pub fn of(r: &rdpipe_transport::reconnect::Reconnect) -> ReconnectReport {
        ReconnectReport {
            offset: r.offset,
            downtime_seconds: r.downtime.as_secs_f64(),
            transport: r.transport.clone(),
        }
    }
}

impl Transfer {
    /// A finished transfer: its transport description, byte count, checksum and
    /// duration.
    pub fn done(
        describe: &str,
        integrity: Option<Integrity>,
        bytes: u64,
        checksum: u64,
        secs: f64,
    ) -> Transfer {
        let (transport, device) = transport_parts(describe);
        Transfer {
            transport: Some(transport),
            device,
            transport_detail: Some(describe.to_string()),
            integrity: integrity.map(|i| i.as_str().to_string()),
            bytes: Some(bytes),
            checksum: Some(format!("{checksum:016x}")),
            seconds: Some(secs),
            rate_bytes_per_second: Some(rate(bytes, secs)),
            reconnects: Vec::new(),
            compress: None,
        }
    }
}

/// `rdsend --json FILE` / `rdrecv --json FILE`.
#[derive(Debug, Clone, Serialize)]
pub struct EndpointReport {
    /// `rdsend` or `rdrecv`.
    pub tool: &'static str,
    /// The tool's version.
    pub version: &'static str,
    /// `sender` or `receiver`.
    pub role: Role,
    /// The peer: its address once connected, else what was asked for.
    pub peer: Option<String>,
    /// The transfer.
    #[serde(flatten)]
    pub transfer: Transfer,
    /// The rate limit in effect, bytes per second (the lower of both ends'
    /// `--rate-limit`); absent without one or when the transfer never started.
    pub rate_limit_bytes_per_second: Option<u64>,
    /// Seconds from start to end of the whole run (connection and handshake too).
    pub wall_seconds: f64,
    /// The tool's exit status.
    pub exit_status: u8,
    /// The error message(s), one line each, when it failed.
    pub errors: Vec<String>,
}

/// A hop of a pipeline in rdpipe's report.
#[derive(Debug, Clone, Serialize)]
pub struct HopReport {
    /// The sending end: a host label (`h1`, `local`) or `rdpipe stdin`.
    pub from: String,
    /// Its segment number (1-based), none for rdpipe's stdin.
    pub from_segment: Option<usize>,
    /// The receiving end: a host label or `rdpipe stdout`.
    pub to: String,
    /// Its segment number (1-based), none for rdpipe's stdout.
    pub to_segment: Option<usize>,
    /// The transfer as the sending end reported it (else as the receiving end did).
    #[serde(flatten)]
    pub transfer: Transfer,
    /// Both ends reported the same byte count and checksum.
    pub verified: bool,
    /// The address the connecting end was told to connect to (none when the
    /// listener never announced its port).
    pub data_address: Option<String>,
    /// Where that address came from: `ssh` (HostName, else the name),
    /// `--data-host`, `loopback`, or `discovered` (an RDMA-capable address the
    /// agents reported, instead of ssh's).
    pub data_address_from: Option<&'static str>,
}

/// A segment of a pipeline in rdpipe's report.
#[derive(Debug, Clone, Serialize)]
pub struct SegmentReport {
    /// 1-based position.
    pub segment: usize,
    /// The host label (`local` for `-:` segments).
    pub host: String,
    /// The command, or `< FILE` / `> FILE`; empty for a relay-only segment.
    pub action: String,
    /// A relay-only segment (`HOST:`): it forwarded its incoming stream, ran no
    /// command (its bytes are its hops').
    pub relay: bool,
    /// The command's status as a shell reports it (128+N for signal N); none when
    /// it did not end by itself or there is no command.
    pub exit_status: Option<i32>,
    /// The signal that killed the command, if one did.
    pub signal: Option<i32>,
    /// The command was stopped by its endpoint after a failure elsewhere.
    pub stopped: bool,
    /// The segment's endpoint reported success.
    pub ok: bool,
    /// The CPU its agent process used (every thread: transfers, relay, hashing),
    /// as the agent measured it when the segment ended; absent from an agent
    /// that did not end.
    pub agent_cpu: Option<CpuReport>,
    /// The CPU its command used (the processes the agent waited for); absent as
    /// `agent_cpu` is.
    pub command_cpu: Option<CpuReport>,
    /// An rdcp side's counts (`side`: `pack` or `unpack`): entries sent or
    /// created, bytes, failures, files that changed while read, and for the
    /// sources' side what `--resume` did not send. Only in rdcp's report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy: Option<rdpipe_control::CopyCounts>,
}

/// CPU time, in a segment of rdpipe's report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuReport {
    /// User-mode seconds.
    pub user_seconds: f64,
    /// Kernel seconds.
    pub system_seconds: f64,
    /// User + kernel.
    pub seconds: f64,
}

impl CpuReport {
    /// The report of `t`.
    pub fn of(t: rdpipe_control::CpuTimes) -> CpuReport {
        CpuReport {
            user_seconds: t.user.as_secs_f64(),
            system_seconds: t.system.as_secs_f64(),
            seconds: t.total().as_secs_f64(),
        }
    }
}

/// rdpipe's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct VerdictReport {
    /// rdpipe's exit status.
    pub exit_status: u8,
    /// Its `rdpipe: error: ...` lines (without the prefix).
    pub errors: Vec<String>,
}

/// One `--to` sink of a fan-out, in `rdpipe --json FILE`.
#[derive(Debug, Clone, Serialize)]
pub struct SinkReport {
    /// 1-based position of its segment.
    pub segment: usize,
    /// The host as written.
    pub host: String,
    /// Its command or `> FILE`.
    pub action: String,
    /// Bytes it received (and verified).
    pub bytes: Option<u64>,
    /// Their xxh3-64 checksum, 16 hex digits.
    pub checksum: Option<String>,
    /// The incoming hop's transport and integrity (`tcp, mac`).
    pub transport: Option<String>,
    /// The stream arrived whole, verified, and the same as the source's.
    pub verified: bool,
    /// Its command's exit status as a shell reports it.
    pub exit_status: Option<i32>,
    /// The sink succeeded (stream verified, command or file too).
    pub ok: bool,
    /// What went wrong, if anything.
    pub problem: Option<String>,
}

/// `rdpipe forward`'s part of `--json FILE`.
#[derive(Debug, Clone, Serialize)]
pub struct ForwardReport {
    /// Where it listened (IP:PORT on the listening host).
    pub listening: Option<String>,
    /// The listening host as written.
    pub listen_host: String,
    /// The target host as written.
    pub target_host: String,
    /// The address the target host connected to.
    pub target: String,
    /// Each connection, in the order they ended.
    pub connections: Vec<ConnectionReport>,
}

/// One forwarded connection.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionReport {
    /// Its number (from 1, in accept order).
    pub id: u32,
    /// The client's address.
    pub peer: String,
    /// Client → target bytes.
    pub bytes_up: u64,
    /// Target → client bytes.
    pub bytes_down: u64,
    /// From accept to the end.
    pub seconds: f64,
    /// Each direction's rate over its lifetime, bytes per second.
    pub up_bytes_per_second: f64,
    /// Likewise back.
    pub down_bytes_per_second: f64,
    /// `closed`, `client-reset`, `target-reset`, `refused`, `unreachable`
    /// or `cut` (open when the forward stopped).
    pub end: String,
    /// The hops' transport (`tcp`, `rdma (rxe0)`), as their ends reported it.
    pub transport: Option<String>,
}

/// One `--from` source of a gather, in `rdpipe --json FILE`.
#[derive(Debug, Clone, Serialize)]
pub struct SourceReport {
    /// Its index (1-based, `RDPIPE_SOURCE_INDEX`).
    pub index: usize,
    /// The host as written.
    pub host: String,
    /// Its command or `< FILE`.
    pub command: String,
    /// Bytes it sent and its receiver verified.
    pub bytes: Option<u64>,
    /// Their xxh3-64 checksum, 16 hex digits.
    pub checksum: Option<String>,
    /// A line merge: the whole lines of it delivered (none with `--each`).
    pub lines: Option<u64>,
    /// Its hop's transport and integrity (`tcp, encrypt`).
    pub transport: Option<String>,
    /// Its stream arrived whole and verified, at every segment of its own.
    pub verified: bool,
    /// Its command's exit status as a shell reports it.
    pub exit_status: Option<i32>,
    /// Times its hop reconnected.
    pub reconnects: usize,
    /// With `--spool`: the most bytes its spool held.
    pub peak_backlog: Option<u64>,
    /// With `--spool`: seconds its receiver waited for room in the spool.
    pub held_back_secs: Option<f64>,
    /// The source succeeded.
    pub ok: bool,
    /// What went wrong, if anything.
    pub problem: Option<String>,
}

/// `rdpipe --json FILE`.
#[derive(Debug, Clone, Serialize)]
pub struct PipeReport {
    /// `rdpipe`.
    pub tool: &'static str,
    /// Its version.
    pub version: &'static str,
    /// The transfers, in pipeline order.
    pub hops: Vec<HopReport>,
    /// The segments, in order.
    pub segments: Vec<SegmentReport>,
    /// With `--to`: each sink's verdict, in chain order (absent otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sinks: Vec<SinkReport>,
    /// With `--from`: each source's verdict, in order (absent otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceReport>,
    /// `rdpipe forward`: where it listened and each connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardReport>,
    /// Agents re-attached after their ssh session was lost, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reattaches: Vec<ReattachReport>,
    /// The outcome.
    pub verdict: VerdictReport,
    /// `--rate-limit`, bytes per second, applied by every hop's sender.
    pub rate_limit_bytes_per_second: Option<u64>,
    /// The signal that interrupted rdpipe (SIGINT 2, SIGTERM 15, SIGHUP 1), if any.
    pub signal: Option<i32>,
    /// Seconds from start to end.
    pub wall_seconds: f64,
}

impl PipeReport {
    /// A report of a run that ended before any segment started (bad arguments).
    pub fn empty(exit_status: u8, errors: Vec<String>, wall_seconds: f64) -> PipeReport {
        PipeReport {
            tool: "rdpipe",
            version: VERSION,
            hops: vec![],
            segments: vec![],
            sinks: vec![],
            sources: vec![],
            forward: None,
            reattaches: vec![],
            rate_limit_bytes_per_second: None,
            verdict: VerdictReport {
                exit_status,
                errors,
            },
            signal: None,
            wall_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_names_its_device_and_integrity() {
        let t = Transfer::done("rdma (rxe0, write)", Some(Integrity::Checksum), 1, 2, 1.0);
        assert_eq!(t.transport.as_deref(), Some("rdma"));
        assert_eq!(t.device.as_deref(), Some("rxe0"));
        assert_eq!(t.integrity.as_deref(), Some("checksum"));
    }

    #[test]
    fn transport_descriptions_split() {
        assert_eq!(transport_parts("tcp"), ("tcp".into(), None));
        assert_eq!(
            transport_parts("rdma (rxe0, write-with-imm)"),
            ("rdma".into(), Some("rxe0".into()))
        );
        assert_eq!(
            transport_parts("rdma (mlx5_0)"),
            ("rdma".into(), Some("mlx5_0".into()))
        );
    }

    #[test]
    fn reports_are_written_whole_and_replace_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "old").unwrap();
        let r = PipeReport::empty(2, vec!["bad".into()], 0.5);
        write_json_atomic(&p, &r).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["verdict"]["exit_status"], 2);
        assert_eq!(v["verdict"]["errors"][0], "bad");
        // Nothing else is left in the directory (the temporary file was renamed).
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let e = write_json_atomic(Path::new("/nonexistent-dir/r.json"), &r).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dir/r.json"), "{e}");
    }
}
