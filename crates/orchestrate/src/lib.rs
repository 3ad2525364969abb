//! rdpipe: Unix pipelines across machines.
//!
//! - [`plan`]: `HOST:CMD` arguments → a [`plan::Pipeline`] value (what `-n` prints);
//! - [`run`]: SSH masters, agents, relaying ports, teardown, the verdict;
//! - [`agent`]: the per-segment endpoint (`rdrecv --agent`);
//! - [`doctor`]: `rdpipe doctor HOST...` (and the hosts' `--doctor-probe`);
//! - [`control`]: the typed line protocol between rdpipe and its agents;
//! - [`report`]: the `--json FILE` reports (endpoint and pipeline), written atomically;
//! - [`ssh`]: ssh options, data addresses, master connections;
//! - [`reach`]: probing a listening host's RDMA-capable addresses (discovery's
//!   "routed and answering" rule);
//! - [`install`]: self-install of the agent on hosts without a usable rdrecv;
//! - [`munge`]: munge's `munge` and `unmunge`, what `--launcher srun` trusts to
//!   seal each agent's control channel;
//! - [`guard`]: the processes that tie an SSH master's life to rdpipe's and a
//!   command's life to its agent's.
#![deny(missing_docs)]

pub mod agent;
pub mod control;
pub mod doctor;
pub mod guard;
pub mod install;
pub mod munge;
pub mod persist;
pub mod plan;
pub mod reach;
pub mod report;
pub mod run;
pub mod srun;
pub mod ssh;

use rdpipe_wire::{Integrity, TransportPref};

/// Parses `auto`, `tcp` or `rdma` (the agent's `--transport`).
pub fn parse_transport(s: &str) -> Result<TransportPref, String> {
    match s {
        "auto" => Ok(TransportPref::Auto),
        "tcp" => Ok(TransportPref::Tcp),
        "rdma" => Ok(TransportPref::Rdma),
        _ => Err(format!("'{s}' is not auto, tcp or rdma")),
    }
}

/// Parses `auto` (this host's [`Integrity::preferred`]), `checksum`, `mac` or
/// `encrypt` (the agent's `--integrity`).
pub fn parse_integrity(s: &str) -> Result<Integrity, String> {
    match s {
        "auto" => Ok(Integrity::preferred()),
        "checksum" => Ok(Integrity::Checksum),
        "mac" => Ok(Integrity::Mac),
        "encrypt" => Ok(Integrity::Encrypt),
        _ => Err(format!("'{s}' is not auto, checksum, mac or encrypt")),
    }
}

/// The spelling [`parse_transport`] reads.
pub fn transport_name(p: TransportPref) -> &'static str {
    match p {
        TransportPref::Auto => "auto",
        TransportPref::Tcp => "tcp",
        TransportPref::Rdma => "rdma",
    }
}

/// If `args` (without the program name) start with one of rdpipe's internal modes
/// (`--agent`, `--ssh-guard`, `--cmd-guard`, `--agent-protocol`, `--doctor-probe`),
/// runs it and returns its exit status.
/// Both `rdpipe` and `rdrecv` call this first.
pub fn internal_mode(args: &[std::ffi::OsString]) -> Option<std::process::ExitCode> {
    match args.first().and_then(|a| a.to_str()) {
        Some("--agent") => Some(agent::main(args[1..].iter().cloned())),
        Some("--ssh-guard") => Some(guard::main(args[1..].iter().cloned())),
        Some("--cmd-guard") => Some(guard::cmd_main(args[1..].iter().cloned())),
        Some("--agent-protocol") => Some(install::print_agent_id()),
        Some("--doctor-probe") => Some(doctor::probe::main(args[1..].iter().cloned())),
        _ => None,
    }
}
