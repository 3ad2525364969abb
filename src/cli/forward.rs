//! `rdpipe forward [LISTEN_HOST:]PORT TARGET_HOST:ADDR:PORT`: its flags (clap
//! derive) and entry point. The word `forward` alone as rdpipe's first
//! argument selects it (a pipeline segment always contains ':'). The plan
//! is `rdpipe_plan::plan_forward`; the run is the ordinary pipeline's.

use crate::cli::common::Failure;
use crate::cli::run_opts::RunOpts;
use clap::Parser;
use rdpipe_orchestrate::run::Config;
use std::path::PathBuf;

/// Examples for `--help` and the man page.
pub const EXAMPLES: &str = "\
Examples:
  # PostgreSQL on db (listening on its loopback) reached at localhost:5432 here:
  rdpipe forward 5432 db:localhost:5432

  # a service on node2, offered on node1's port 8080 to node1's own clients:
  rdpipe forward node1:8080 node2:localhost:80

  # one connection only, on any free port (the port is printed), for a script:
  rdpipe forward --once 0 host2:localhost:5201

  # listen on every address of this machine, each connection reported:
  rdpipe forward -v --bind 0.0.0.0 9000 host2:10.1.0.7:9000";

/// rdpipe forward's exit statuses, for the man page.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Stopped by Ctrl-C or SIGTERM (or, with --once, its connection closed) and both hops ended verified; connections refused at the target or reset by their peers do not change it."),
    ("1", "The forward failed: the port could not be bound, a host could not be reached, a hop broke beyond --reconnect-timeout."),
    ("2", "Bad arguments."),
    ("130, 143", "A second SIGINT or SIGTERM, half a second or more after the first, interrupted the orderly stop."),
];

/// Forward TCP connections from one host to another over authenticated hops.
///
/// Connections accepted on PORT at LISTEN_HOST (this machine when omitted
/// or `-`) are carried to TARGET_HOST, which connects each to ADDR:PORT as
/// TARGET_HOST sees it (`localhost:5432` is TARGET_HOST's own loopback)
/// and relays both directions, as `ssh -L` does, over RDMA where both
/// hosts have it, else TCP. Every program that speaks TCP works unchanged.
///
/// All connections share one pair of hops (one each way), authenticated
/// and protected as every rdpipe hop is (--integrity; encrypted by
/// default): a new connection costs no handshake. Half-closes pass through
/// (a client's shutdown reaches the server as end of file while the other
/// direction goes on), a reset on one side resets the other, a refused
/// connect at the target closes the client's connection (and warns), and
/// each connection has its own flow-control window, so a slow reader slows
/// only its own writer.
///
/// It runs until Ctrl-C or SIGTERM, which cut the open connections and end
/// cleanly (a second one, half a second later or more, interrupts). One line on stderr says where it
/// listens (the port chosen when PORT is 0); -v adds one per connection.
#[derive(Debug, Parser)]
#[command(name = "rdpipe forward", bin_name = "rdpipe forward", version, verbatim_doc_comment, after_help = EXAMPLES)]
pub struct ForwardArgs {
    /// Where to accept connections: PORT on this machine, or
    /// LISTEN_HOST:PORT (0: any free port).
    #[arg(value_name = "[LISTEN_HOST:]PORT")]
    pub listen: String,

    /// Where each connection goes: TARGET_HOST, and the address and port it
    /// connects to as TARGET_HOST resolves them.
    #[arg(value_name = "TARGET_HOST:ADDR:PORT")]
    pub target: String,

    /// The address to listen on at LISTEN_HOST (default: 127.0.0.1, its
    /// loopback, as ssh -L without GatewayPorts; 0.0.0.0 or :: for every
    /// address).
    #[arg(long, value_name = "ADDR", default_value = rdpipe_plan::DEFAULT_BIND)]
    pub bind: String,

    /// End after the first connection closes (later ones are refused).
    #[arg(long)]
    pub once: bool,

    /// At most N connections open at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100000))]
    pub max_connections: Option<u64>,

    /// Everything but what to forward (as rdpipe's).
    #[command(flatten)]
    pub run: RunOpts,
}

impl ForwardArgs {
    /// The orchestrator's configuration (no progress line: a forward has
    /// no one stream to show).
    pub fn config(self) -> Config {
        let mut c = self.run.config();
        c.progress = false;
        c.forward = Some(rdpipe_plan::ForwardSpec {
            listen: self.listen,
            target: self.target,
            bind: self.bind,
            once: self.once,
            max: self.max_connections.map(|n| n as usize),
        });
        c
    }
}

/// Whether rdpipe's arguments (without the program name) ask for a forward.
pub fn wanted(args: &[std::ffi::OsString]) -> bool {
    args.first().is_some_and(|a| a == "forward")
}

/// Runs `rdpipe forward`; `exe` is rdpipe itself.
pub fn run(args: ForwardArgs, exe: PathBuf) -> Result<(), Failure> {
    let json = args.run.json.clone();
    crate::cli::run_opts::run_and_report(args.config(), exe, json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse() {
        let a = ForwardArgs::try_parse_from([
            "forward",
            "--once",
            "--bind",
            "0.0.0.0",
            "-v",
            "--max-connections",
            "4",
            "8080",
            "h2:localhost:80",
        ])
        .unwrap();
        assert!(a.once);
        assert_eq!(a.listen, "8080");
        let c = a.config();
        assert!(!c.progress);
        let f = c.forward.unwrap();
        assert_eq!((f.bind.as_str(), f.max), ("0.0.0.0", Some(4)));
        assert!(ForwardArgs::try_parse_from(["forward", "8080"]).is_err());
        assert!(
            ForwardArgs::try_parse_from(["forward", "--max-connections", "0", "1", "h:a:1"])
                .is_err()
        );
        assert!(wanted(&["forward".into(), "1".into()]));
        assert!(!wanted(&["forward:cat".into()]));
    }
}
