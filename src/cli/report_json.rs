//! `--json FILE` for rdsend and rdrecv: the run's outcome (a transfer's report,
//! or the failure with its exit status) as the JSON of
//! [`rdpipe_report::EndpointReport`], written atomically whether the
//! run succeeded or not.

use super::common::{fail, Failure};
use rdpipe_report::{
    write_json_atomic, CompressReport, EndpointReport, ReconnectReport, Role, Transfer, VERSION,
};
use rdpipe_transport::error::EXIT_FAILURE;
use rdpipe_transport::Report;
use std::path::Path;
use std::time::Instant;

/// Writes the report of a run that started at `start` and ended with `outcome` to
/// `path` (when given), and passes the outcome on. `peer` names the peer when the
/// run never learnt its address (rdsend's HOST:PORT). A report that cannot be
/// written fails the run (exit 1) with a message naming the file.
pub fn finish(
    path: Option<&Path>,
    tool: &'static str,
    role: Role,
    peer: Option<String>,
    start: Instant,
    outcome: Result<Report, Failure>,
) -> Result<Report, Failure> {
    let Some(path) = path else {
        return outcome;
    };
    let rate_limit = outcome
        .as_ref()
        .ok()
        .and_then(|r| r.rate_limit)
        .map(|r| r.bytes_per_sec());
    let (transfer, peer, exit_status, errors) = match &outcome {
        Ok(r) => (
            Transfer {
                reconnects: r.reconnects.iter().map(ReconnectReport::of).collect(),
                compress: r
                    .compress
                    .as_deref()
                    .map(|c| CompressReport::of(&rdpipe_control::CompressSummary::of(c))),
                ..Transfer::done(
                    &r.transport,
                    Some(r.integrity),
                    r.bytes,
                    r.checksum,
                    r.elapsed.as_secs_f64(),
                )
            },
            Some(r.peer.clone()),
            0,
            vec![],
        ),
        Err(f) => (Transfer::default(), peer, f.code, f.messages.clone()),
    };
    let report = EndpointReport {
        tool,
        version: VERSION,
        role,
        peer,
        transfer,
        rate_limit_bytes_per_second: rate_limit,
        wall_seconds: start.elapsed().as_secs_f64(),
        exit_status,
        errors,
    };
    match (write_json_atomic(path, &report), outcome) {
        (Ok(()), outcome) => outcome,
        (Err(e), Ok(_)) => Err(fail(EXIT_FAILURE, e)),
        (Err(e), Err(mut f)) => {
            f.messages.push(e.to_string());
            Err(f)
        }
    }
}
