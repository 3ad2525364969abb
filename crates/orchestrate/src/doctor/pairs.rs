//! `rdpipe doctor`'s test transfers: for each consecutive pair of hosts, a real
//! pipeline `A:'head -c SIZE /dev/zero' B:'> /dev/null'` (run through
//! [`crate::run::run_with_input`], reading nothing from rdpipe's stdin) over
//! TCP, and over RDMA where both hosts have an active RDMA port; the rate
//! comes from the hop's report, beside the sending port's link rate.

use super::hosts::Target;
use super::{DoctorConfig, HostReport, PairReport, PairTransfer};
use crate::run::{run_with_input, Config, LocalExe};
use rdpipe_report::{PipeReport, Transfer};
use rdpipe_wire::TransportPref;
use std::path::Path;

fn config(cfg: &DoctorConfig, from: &Target, to: &Target, transport: TransportPref) -> Config {
    Config {
        prepared: None,
        segments: vec![
            format!("{}:head -c {} /dev/zero", from.arg, cfg.size),
            format!("{}:> /dev/null", to.arg),
        ],
        sinks: vec![],
        sources: vec![],
        gather: rdpipe_plan::GatherMode::Lines { tag: false },
        spool: None,
        forward: None,
        min_ok: None,
        replay_window: 0,
        dry_run: false,
        verbose: 0,
        quiet: true,
        progress: false,
        log: None,
        ssh_options: cfg.ssh_options.clone(),
        ssh_config: cfg.ssh_config.clone(),
        data_host: cfg.data_host.clone(),
        remote_bin: cfg.remote_bin.clone(),
        install: cfg.install,
        integrity: rdpipe_wire::Integrity::Mac,
        transport,
        chunk_size: cfg.chunk_size,
        slots: cfg.slots,
        connect_timeout: cfg.connect_timeout,
        reconnect_timeout: 0,
        handshake_timeout: 10,
        rate_limit: None,
        compress: rdpipe_wire::Compress::None,
        max_sessions: 10,
        direct: false,
        persist: None,
        launcher: Default::default(),
        jobid: None,
        summary: true,
    }
}

/// The link rate (Gb/s) of `device`'s first active port on the host `probe`
/// describes.
fn link_rate(host: &HostReport, device: Option<&str>) -> Option<f64> {
    let probe = host.probe.as_ref()?;
    probe
        .active_ports()
        .find(|(d, _)| Some(d.name.as_str()) == device)
        .and_then(|(_, p)| p.rate_gbps)
}

fn outcome(report: Option<PipeReport>, errors: Vec<String>, sender: &HostReport) -> PairTransfer {
    // The hop between the two segments.
    let hop: Transfer = report
        .as_ref()
        .and_then(|r| {
            r.hops
                .iter()
                .find(|h| h.from_segment == Some(1) && h.to_segment == Some(2))
        })
        .map(|h| h.transfer.clone())
        .unwrap_or_default();
    let gbit = hop.rate_bytes_per_second.map(|r| r * 8.0 / 1e9);
    PairTransfer {
        ok: errors.is_empty(),
        link_gbps: link_rate(sender, hop.device.as_deref()),
        transport: hop.transport_detail,
        device: hop.device,
        bytes: hop.bytes,
        seconds: hop.seconds,
        gbit_per_second: gbit,
        errors,
    }
}

fn transfer(
    cfg: &DoctorConfig,
    pair: (&Target, &Target),
    sender: &HostReport,
    transport: TransportPref,
    exe: &Path,
) -> PairTransfer {
    let exe = LocalExe {
        exe: exe.to_path_buf(),
    };
    let (result, report) = run_with_input(config(cfg, pair.0, pair.1, transport), exe, false);
    let errors = match result {
        Ok(()) => vec![],
        Err(e) => e.messages(),
    };
    outcome(report, errors, sender)
}

/// Why a host cannot take part in a test transfer, if it cannot.
fn unusable(r: &HostReport) -> Option<String> {
    if r.ssh_error.is_some() {
        Some(format!("{} is unreachable", r.host))
    } else if r.probe.is_none() {
        Some(format!("{} has no usable rdrecv", r.host))
    } else {
        None
    }
}

/// The transfers between each consecutive pair of `targets`.
pub fn run(
    cfg: &DoctorConfig,
    targets: &[Target],
    reports: &[HostReport],
    exe: &Path,
) -> Vec<PairReport> {
    let mut out = Vec::new();
    for i in 1..targets.len() {
        let (a, b) = (&reports[i - 1], &reports[i]);
        let mut p = PairReport {
            from: a.host.clone(),
            to: b.host.clone(),
            tcp: None,
            rdma: None,
            skipped: None,
        };
        if cfg.size == 0 {
            p.skipped = Some("--size 0: no test transfers".into());
        } else if let Some(why) = unusable(a).or_else(|| unusable(b)) {
            p.skipped = Some(why);
        } else {
            let pair = (&targets[i - 1], &targets[i]);
            p.tcp = Some(transfer(cfg, pair, a, TransportPref::Tcp, exe));
            match (a.rdma(), b.rdma()) {
                (Some(_), Some(_)) => {
                    p.rdma = Some(transfer(cfg, pair, a, TransportPref::Rdma, exe));
                }
                _ => {
                    let without: Vec<&str> = [a, b]
                        .iter()
                        .filter(|r| r.rdma().is_none())
                        .map(|r| r.host.as_str())
                        .collect();
                    p.skipped = Some(format!(
                        "no RDMA transfer: no active RDMA port on {}",
                        without.join(" and ")
                    ));
                }
            }
        }
        out.push(p);
    }
    out
}
