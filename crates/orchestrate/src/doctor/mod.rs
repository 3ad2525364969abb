//! `rdpipe doctor HOST...`: checks hosts before a long transfer. For each host
//! ([`hosts`]): ssh reachability, the rdrecv there and its version, and its own
//! [`probe`] (RDMA libraries, devices and ports, addresses, `ulimit -l`); the
//! address other hosts will use for its data. Then, for each consecutive pair
//! ([`pairs`]), a short TCP transfer and, where both have an active RDMA port, a
//! short RDMA one, with the rate beside the port's link rate. [`checks`] turns
//! what was found into problems, one line each with its fix; [`text`] prints
//! the report. Exit status 0 when no problem was found, 1 otherwise.

pub mod checks;
pub mod hosts;
pub mod pairs;

pub mod text;

use rdpipe_agent::inventory::HostProbe;
use rdpipe_plan::PlanError;
use serde::Serialize;
use std::path::PathBuf;

/// What `rdpipe doctor` was asked to do.
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    /// The hosts, as written (`-` or `localhost` is this machine).
    pub hosts: Vec<String>,
    /// `-o` options for ssh.
    pub ssh_options: Vec<String>,
    /// `-F` file for ssh.
    pub ssh_config: Option<PathBuf>,
    /// `--data-host HOST=ADDR` values.
    pub data_host: Vec<String>,
    /// `--remote-bin DIR`.
    pub remote_bin: Option<String>,
    /// Install the agent where no usable rdrecv is found (not `--no-install`),
    /// as a pipeline would.
    pub install: bool,
    /// Chunk size the transfers would use (what a transfer pins).
    pub chunk_size: u32,
    /// Slots the transfers would use.
    pub slots: u32,
    /// Bytes each test transfer moves; 0 skips the transfers.
    pub size: u64,
    /// Seconds to keep trying to connect.
    pub connect_timeout: u64,
}

/// One host's findings.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// The host as written.
    pub host: String,
    /// This machine (`-`, `localhost`): no ssh.
    pub local: bool,
    /// The address other hosts use for its data (remote hosts).
    pub data_address: Option<String>,
    /// Where that address comes from: `--data-host`, `ssh HostName` or `name`.
    pub data_address_from: Option<&'static str>,
    /// What it resolves to here.
    pub data_ips: Vec<String>,
    /// The ssh connection failed: why.
    pub ssh_error: Option<String>,
    /// The command that ran the probe there.
    pub rdrecv: Option<String>,
    /// No rdrecv there.
    pub rdrecv_missing: bool,
    /// Where the agent came from: `PATH`, or the cache directory it was found
    /// in or installed into (self-install).
    pub agent: Option<String>,
    /// Self-install was needed and failed: why, with what to install.
    pub install_error: Option<String>,
    /// `rdrecv --version` there, when its probe failed.
    pub other_version: Option<String>,
    /// Why the probe failed, when it did.
    pub probe_error: Option<String>,
    /// The probe's findings.
    pub probe: Option<HostProbe>,
    /// Observations that are not problems.
    pub notes: Vec<String>,
}

impl HostReport {
    /// A report with nothing found yet.
    pub fn new(host: &str, local: bool) -> HostReport {
        HostReport {
            host: host.to_string(),
            local,
            data_address: None,
            data_address_from: None,
            data_ips: vec![],
            ssh_error: None,
            rdrecv: None,
            rdrecv_missing: false,
            agent: None,
            install_error: None,
            other_version: None,
            probe_error: None,
            probe: None,
            notes: vec![],
        }
    }

    /// The probe, when it has active RDMA ports.
    pub fn rdma(&self) -> Option<&HostProbe> {
        self.probe
            .as_ref()
            .filter(|p| p.libraries.loaded && p.active_ports().next().is_some())
    }
}

/// One test transfer between a pair.
#[derive(Debug, Clone, Serialize)]
pub struct PairTransfer {
    /// It moved every byte, verified.
    pub ok: bool,
    /// As `-v` says it (`tcp`, `rdma (rxe0, write-with-imm)`).
    pub transport: Option<String>,
    /// The RDMA device, for RDMA.
    pub device: Option<String>,
    /// Bytes moved.
    pub bytes: Option<u64>,
    /// Seconds the data phase took.
    pub seconds: Option<f64>,
    /// The rate, Gb/s (10^9 bits per second).
    pub gbit_per_second: Option<f64>,
    /// The sending port's link rate, Gb/s (RDMA).
    pub link_gbps: Option<f64>,
    /// rdpipe's error lines when it failed.
    pub errors: Vec<String>,
}

/// The transfers between two consecutive hosts.
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// Sending host, as written.
    pub from: String,
    /// Receiving host, as written.
    pub to: String,
    /// The TCP transfer (none when skipped).
    pub tcp: Option<PairTransfer>,
    /// The RDMA transfer (none when skipped).
    pub rdma: Option<PairTransfer>,
    /// Why a transfer was skipped.
    pub skipped: Option<String>,
}

/// A problem and its fix: printed as `HOST: PROBLEM: FIX`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    /// The host (or `h1 -> h2` for a pair).
    pub host: String,
    /// What is wrong.
    pub problem: String,
    /// What to do.
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.host, self.problem, self.fix)
    }
}

/// Everything `rdpipe doctor` found (`--json` prints this).
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// `rdpipe doctor`.
    pub tool: &'static str,
    /// rdpipe's version.
    pub version: &'static str,
    /// rdpipe's agent protocol.
    pub agent_protocol: u32,
    /// Each host, in the order given.
    pub hosts: Vec<HostReport>,
    /// Each consecutive pair.
    pub pairs: Vec<PairReport>,
    /// Every problem found.
    pub problems: Vec<Problem>,
    /// 0 when no problem was found, else 1.
    pub exit_status: u8,
}

/// Runs the checks; `exe` is this program (the ssh master guard, and the local
/// agents of the test transfers). Fails only for arguments that name no host.
pub fn run(cfg: &DoctorConfig, exe: &std::path::Path) -> Result<DoctorReport, PlanError> {
    let targets = hosts::parse(&cfg.hosts)?;
    let mut reports = hosts::gather(cfg, &targets, exe);
    let pairs = pairs::run(cfg, &targets, &reports, exe);
    let mut problems = Vec::new();
    for r in &mut reports {
        let (p, notes) = checks::host(r);
        problems.extend(p);
        r.notes.extend(notes);
    }
    problems.extend(pairs.iter().flat_map(checks::pair));
    Ok(DoctorReport {
        tool: "rdpipe doctor",
        version: rdpipe_report::VERSION,
        agent_protocol: rdpipe_control::PROTOCOL,
        exit_status: u8::from(!problems.is_empty()),
        hosts: reports,
        pairs,
        problems,
    })
}
