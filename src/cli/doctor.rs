//! `rdpipe doctor HOST...`: its flags (clap derive) and entry point. The word
//! `doctor` alone as rdpipe's first argument selects it (a pipeline segment
//! always contains ':', so it cannot be one). The checks live in
//! `rdpipe_orchestrate::doctor`.

use crate::cli::common::{parse_bytes, parse_size, parse_slots, Failure};
use clap::Parser;
use rdpipe_orchestrate::doctor::{self, DoctorConfig};
use std::path::PathBuf;

/// Examples for `--help` and the man page.
pub const EXAMPLES: &str = "\
Examples:
  # check two hosts, and transfers from host1 to host2:
  rdpipe doctor host1 host2

  # this machine alone (no ssh):
  rdpipe doctor -

  # a three-host chain, the data of host2 over its IPoIB address, as JSON:
  rdpipe doctor --data-host host2=10.0.0.2 --json host1 host2 host3

  # only the hosts, no test transfers:
  rdpipe doctor --size 0 host1 host2";

/// rdpipe doctor's exit statuses, for the man page.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "No problem was found."),
    (
        "1",
        "At least one problem was found (each printed as HOST: PROBLEM: FIX).",
    ),
    ("2", "Bad arguments."),
];

/// Check hosts before a transfer: ssh, rdrecv, RDMA devices, limits, rates.
///
/// For each HOST (`-` is this machine, without ssh): whether ssh reaches it,
/// the rdrecv found there and its version, whether the RDMA libraries load,
/// each RDMA device and port (state, link layer, rate, MTU, GIDs with their
/// RoCE version, netdev and its addresses, NUMA node), `ulimit -l` against
/// what a transfer pins, and the address other hosts will use for its data.
/// Then, for each consecutive pair in the order given, a short TCP transfer
/// and, where both have an active RDMA port, a short RDMA transfer, with the
/// rate beside the port's link rate.
///
/// Every problem found is printed as one line, `HOST: PROBLEM: FIX`, at the
/// end. Exit status 0 when there is none, 1 otherwise.
#[derive(Debug, Parser)]
#[command(name = "rdpipe doctor", bin_name = "rdpipe doctor", version, verbatim_doc_comment, after_help = EXAMPLES)]
pub struct DoctorArgs {
    /// The hosts, in pipeline order (`user@host`, ssh aliases, `[host:PORT]`;
    /// `-` or `localhost` for this machine).
    #[arg(value_name = "HOST", required = true)]
    pub hosts: Vec<String>,

    /// Print the report as JSON on stdout instead of text.
    #[arg(long)]
    pub json: bool,

    /// Bytes each test transfer moves (0: none), e.g. 64M, 1G.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_bytes)]
    pub size: u64,

    /// An option for ssh, as for `ssh -o` (repeatable).
    #[arg(short = 'o', long = "ssh-option", value_name = "OPTION")]
    pub ssh_options: Vec<String>,

    /// An ssh configuration file instead of ~/.ssh/config, as for `ssh -F`.
    #[arg(short = 'F', long = "ssh-config", value_name = "FILE")]
    pub ssh_config: Option<PathBuf>,

    /// The address the other hosts use to reach HOST's data endpoints
    /// (repeatable), as for rdpipe.
    #[arg(long, value_name = "HOST=ADDR")]
    pub data_host: Vec<String>,

    /// Directory holding rdrecv on the remote hosts (default: found in PATH,
    /// else installed as a pipeline would).
    #[arg(long, value_name = "DIR")]
    pub remote_bin: Option<String>,

    /// Do not install the agent on hosts without a usable rdrecv: report it.
    #[arg(long)]
    pub no_install: bool,

    /// The chunk size the transfers will use (what a transfer pins is this
    /// times --slots).
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_size)]
    pub chunk_size: u32,

    /// The buffers in flight the transfers will use.
    #[arg(long, value_name = "N", default_value = "2", value_parser = parse_slots)]
    pub slots: u32,

    /// Seconds to keep trying to connect (ssh and data connections).
    #[arg(long, value_name = "SECS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub connect_timeout: u64,
}

impl DoctorArgs {
    /// The checks' configuration.
    pub fn config(self) -> DoctorConfig {
        DoctorConfig {
            hosts: self.hosts,
            ssh_options: self.ssh_options,
            ssh_config: self.ssh_config,
            data_host: self.data_host,
            remote_bin: self.remote_bin,
            install: !self.no_install,
            chunk_size: self.chunk_size,
            slots: self.slots,
            size: self.size,
            connect_timeout: self.connect_timeout,
        }
    }
}

/// Whether rdpipe's arguments (without the program name) ask for the doctor.
pub fn wanted(args: &[std::ffi::OsString]) -> bool {
    args.first().is_some_and(|a| a == "doctor")
}

/// Runs `rdpipe doctor` (`args` without the program name, starting with
/// `doctor`); prints the report on stdout. `exe` is rdpipe itself.
pub fn run(args: DoctorArgs, exe: PathBuf) -> Result<(), Failure> {
    let json = args.json;
    let report = doctor::run(&args.config(), &exe).map_err(|e| Failure {
        messages: vec![e.to_string()],
        code: 2,
    })?;
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| Failure {
            messages: vec![format!("cannot encode the report: {e}")],
            code: 1,
        })?;
        println!("{text}");
    } else {
        print!("{}", doctor::text::render(&report));
    }
    match report.exit_status {
        0 => Ok(()),
        code => Err(Failure {
            messages: vec![],
            code,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        let a =
            DoctorArgs::try_parse_from(["doctor", "--size", "64M", "--json", "-", "h2"]).unwrap();
        assert_eq!(a.size, 64 << 20);
        assert!(a.json);
        assert_eq!(a.hosts, ["-", "h2"]);
        assert!(DoctorArgs::try_parse_from(["doctor"]).is_err());
        assert!(wanted(&["doctor".into(), "h1".into()]));
        assert!(!wanted(&["doctor:cat".into()]));
    }
}
