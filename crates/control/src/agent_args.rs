//! The agent's command line: [`AgentArgs`] is both what rdpipe writes
//! ([`AgentArgs::to_argv`]) and what the agent parses (clap), side by side,
//! so that the two cannot drift apart (the round trip is tested below).
//! Each flag and its value are two words, in a fixed order (the links and
//! tuning, then the chain roles, then what the segment does), as scripts
//! and `ps` show them; the free-form values (a command, file names, a
//! label) may start with `-`: the parser takes them as values.

use rdpipe_wire::{Compress, Integrity, TransportPref};

/// How one end of a hop takes part in the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Link {
    /// This end has no such stream.
    None,
    /// This end listens on an ephemeral port and announces it.
    Listen,
    /// This end connects to the other, once told where.
    Connect,
}

impl Link {
    /// The agent's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Link::None => "none",
            Link::Listen => "listen",
            Link::Connect => "connect",
        }
    }
}

fn parse_mirror(s: &str) -> Result<rdpipe_copy::mirror::Mirror, String> {
    rdpipe_copy::mirror::Mirror::parse(s)
        .ok_or_else(|| format!("{s}: not delete or dry-run, then ,force and ,verbose"))
}

fn parse_stripe(s: &str) -> Result<rdpipe_copy::stripe::Stripe, String> {
    rdpipe_copy::stripe::Stripe::parse(s).ok_or_else(|| format!("{s}: not K/N/RUN"))
}

/// The agent's command line (hidden; written by rdpipe).
#[derive(Debug, Clone, PartialEq, clap::Parser)]
#[command(name = "rdrecv --agent", about = "rdpipe endpoint agent (internal)")]
#[command(group(clap::ArgGroup::new("action").required(true).args(["cmd", "read", "write", "append", "relay", "pack", "unpack", "list", "save_listing", "forward_listen", "forward_target"])))]
pub struct AgentArgs {
    /// Label for messages.
    #[arg(long, allow_hyphen_values = true, default_value = "agent")]
    pub label: String,
    /// The incoming transfer.
    #[arg(long, value_enum)]
    pub input: Link,
    /// The outgoing transfer.
    #[arg(long, value_enum)]
    pub output: Link,
    /// The address the incoming side listens at (the address its peer connects
    /// to; used when it is an IP address of this host).
    #[arg(long, allow_hyphen_values = true)]
    pub in_addr: Option<String>,
    /// Likewise for the outgoing side.
    #[arg(long, allow_hyphen_values = true)]
    pub out_addr: Option<String>,
    /// Chunk size in bytes.
    #[arg(long, default_value_t = rdpipe_wire::DEFAULT_CHUNK_SIZE)]
    pub chunk_size: u32,
    /// Buffers in flight.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// auto, tcp or rdma.
    #[arg(long, default_value = "auto", value_parser = crate::transport_parser())]
    pub transport: TransportPref,
    /// auto, checksum, mac or encrypt (rdpipe always says which).
    #[arg(long, default_value = "auto", value_parser = crate::integrity_parser())]
    pub integrity: Integrity,
    /// Seconds the authentication handshake may take.
    #[arg(long, default_value_t = 10)]
    pub handshake_timeout: u64,
    /// `--rate-limit` in bytes per second (each transfer of the segment tells
    /// its peer; the sender paces).
    #[arg(long)]
    pub rate_limit: Option<rdpipe_transport::Rate>,
    /// `--compress` for every transfer of the segment (none, auto, zstd:LEVEL).
    #[arg(long, default_value = "none")]
    pub compress: rdpipe_wire::Compress,
    /// Seconds to keep retrying a connect.
    #[arg(long, default_value_t = 30)]
    pub connect_timeout: u64,
    /// Seconds a hop whose connection died tries to reconnect and resume
    /// (rdpipe's `--reconnect-timeout`; 0: off).
    #[arg(long, default_value_t = 60)]
    pub reconnect_timeout: u64,
    /// Outlive a control channel that closes without `BYE` by up to SECS,
    /// waiting for rdpipe to re-attach (`--launcher ssh`; 0: end at once).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub reattach: u64,
    /// Bytes each sending hop keeps until its receiver has them, to resume
    /// after a reconnect (rdpipe's `--replay-window`).
    #[arg(long, value_name = "BYTES", default_value_t = rdpipe_transport::endpoint::REPLAY_WINDOW)]
    pub reconnect_window: usize,
    /// Run `SHELL -c CMD` (the user's login shell).
    #[arg(long, allow_hyphen_values = true)]
    pub cmd: Option<String>,
    /// Send this file (`< FILE`).
    #[arg(long, allow_hyphen_values = true)]
    pub read: Option<String>,
    /// Write the stream into this file (`> FILE`).
    #[arg(long, allow_hyphen_values = true)]
    pub write: Option<String>,
    /// Append the stream to this file (`>> FILE`).
    #[arg(long, allow_hyphen_values = true)]
    pub append: Option<String>,
    /// Relay only (`HOST:`, an empty command): forward the incoming stream to
    /// the outgoing transfer, no command (see the agent's passthrough).
    #[arg(long)]
    pub relay: bool,
    /// rdcp's source side: send these paths as an entry stream (repeated).
    #[arg(long, allow_hyphen_values = true, value_name = "PATH")]
    pub pack: Vec<String>,
    /// With `--pack`: directories too (rdcp's `-r`).
    #[arg(long)]
    pub recursive: bool,
    /// With `--pack`: extended attributes too (rdcp's `--xattrs`).
    #[arg(long)]
    pub xattrs: bool,
    /// With `--pack`: expand the wildcards of the paths on this host, as scp
    /// does for remote sources (`rdpipe_copy::glob`).
    #[arg(long)]
    pub glob: bool,
    /// With `--pack`: FIFOs, sockets and device nodes too; with `--unpack`:
    /// create them (rdcp's `--specials`).
    #[arg(long)]
    pub specials: bool,
    /// With `--pack`: the destination's listing (`rdcp --resume`), in the
    /// private directory of the copy whose random id is RUN
    /// (`rdpipe_copy::private`), read and then removed.
    #[arg(long, allow_hyphen_values = true, value_name = "RUN")]
    pub manifest: Option<String>,
    /// `rdcp --resume`'s first step on the sources' host: save the incoming
    /// listing in a new private directory for the copy whose id is RUN.
    #[arg(long, allow_hyphen_values = true, value_name = "RUN")]
    pub save_listing: Option<String>,
    /// `rdpipe forward`'s listening side: accept TCP connections at
    /// ADDR:PORT (PORT 0: any free port) and carry each over the segment's
    /// two hops (out: to the target, in: back) as `rdpipe_wire::mux` frames.
    #[arg(long, value_name = "ADDR:PORT")]
    pub forward_listen: Option<String>,
    /// With `--forward-listen`: end after the first connection closes.
    #[arg(long)]
    pub forward_once: bool,
    /// With `--forward-listen`: at most N connections open at once (more
    /// wait in the listen backlog).
    #[arg(long, value_name = "N")]
    pub forward_max: Option<usize>,
    /// `rdpipe forward`'s target side: connect each forwarded connection to
    /// HOST:PORT (as this host resolves it).
    #[arg(long, value_name = "HOST:PORT")]
    pub forward_target: Option<String>,
    /// With `--pack`/`--unpack`: this is stream K of N of the copy whose
    /// random id is RUN (hex), rdcp's `--streams` (`rdpipe_copy::stripe`).
    #[arg(long, value_name = "K/N/RUN", value_parser = parse_stripe)]
    pub stripe: Option<rdpipe_copy::stripe::Stripe>,
    /// `rdcp --resume`'s first step: send the listing of what DEST holds.
    #[arg(long, allow_hyphen_values = true, value_name = "DEST")]
    pub list: Option<String>,
    /// With `--list`: each complete file's content hash too (rdcp's
    /// `--checksum`).
    #[arg(long)]
    pub checksum: bool,
    /// With `--list`: a pattern of a source's last component (repeated,
    /// `rdpipe_copy::glob`: a literal name's wildcard characters escaped);
    /// with `--unpack`, the one source's name of a resumed copy.
    #[arg(long, allow_hyphen_values = true, value_name = "NAME")]
    pub top: Vec<String>,
    /// rdcp's destination side: create the entry stream's files beneath DEST.
    #[arg(long, allow_hyphen_values = true, value_name = "DEST")]
    pub unpack: Option<String>,
    /// With `--unpack`: DEST must be an existing directory.
    #[arg(long)]
    pub must_be_dir: bool,
    /// With `--unpack`: keep modes and times (rdcp's `-p`).
    #[arg(long)]
    pub preserve: bool,
    /// With `--unpack --preserve`: drop set-uid and set-gid bits (rdcp's
    /// `--no-setid`).
    #[arg(long)]
    pub no_setid: bool,
    /// Write `--write`/`--append`'s file with O_DIRECT (rdpipe's `--direct`);
    /// with `--pack`/`--unpack`, read or write big files so (rdcp's).
    #[arg(long)]
    pub direct: bool,
    /// A `--to` sink of a fan-out: the incoming stream feeds the command (or
    /// `> FILE`) and, with an outgoing transfer, is relayed to the next sink; a
    /// failure of the local part is reported but stops neither (see
    /// the agent's relay).
    #[arg(long)]
    pub sink: bool,
    /// A `--to` sink that relays: keep the last BYTES of the relayed stream
    /// so that the chain can re-link around the next sink if it dies
    /// (rdpipe's `--replay-window`; 0: no re-link).
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    pub replay_window: usize,
    /// A `--to` sink fed by another sink: its incoming hop is a chain hop
    /// (keyed with the chain's secret) that re-links when its relay dies.
    #[arg(long)]
    pub chain_in: bool,
    /// A line merge's lanes (`rdpipe --from`): one incoming transfer per
    /// source, in source order, each taking part as this says; their lines
    /// are merged whole into the segment's input (the agent's gather). Each
    /// lane's key is on the key line after the two hops' keys.
    #[arg(long = "lane", value_enum, value_name = "LINK")]
    pub lanes: Vec<Link>,
    /// With `--lane`: how many lanes must arrive whole for the merged
    /// input to end cleanly (rdpipe's `--min-ok`; all without).
    #[arg(long, value_name = "N")]
    pub lanes_needed: Option<usize>,
    /// With `--lane`: the address the lanes listen at (as `--in-addr`).
    #[arg(long, allow_hyphen_values = true)]
    pub lane_addr: Option<String>,
    /// With `--lane` (rdpipe's `--tag`): each lane's line prefix, in lane
    /// order.
    #[arg(long = "lane-tag", allow_hyphen_values = true, value_name = "TEXT")]
    pub lane_tags: Vec<String>,
    /// The `--from` source whose stream this segment carries (a source, or
    /// an `--each` instance): the command's `RDPIPE_SOURCE`; with no
    /// outgoing transfer, its stdout goes to rdpipe's stderr.
    #[arg(long, allow_hyphen_values = true, value_name = "HOST")]
    pub source_host: Option<String>,
    /// A gather's `--spool`: the segment's incoming stream (each lane's, for a
    /// line merge) passes through a spool of this size (`SIZE[:DIR]`).
    #[arg(long, value_name = "SIZE[:DIR]", allow_hyphen_values = true)]
    pub spool: Option<crate::SpoolSpec>,
    /// With `--source-host`: the source's index (1-based),
    /// `RDPIPE_SOURCE_INDEX`.
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub source_index: usize,
    /// The control channel is Slurm's step I/O (`--launcher srun`): agree
    /// its key through munge first and open every line from rdpipe
    /// (the agent's trust, [`crate::seal`]).
    #[arg(long)]
    pub munge: bool,
    /// With `--munge`: munged's socket (Slurm's `AuthInfo=socket=`); munge's
    /// default without.
    #[arg(long, value_name = "PATH", requires = "munge")]
    pub munge_socket: Option<std::path::PathBuf>,
    /// With `--pack`/`--unpack`/`--list`: the copy is a mirror (rdcp's
    /// `--delete`, `rdpipe_copy::mirror`): `delete` or `dry-run`, then
    /// `,force` (`--force-delete`) and `,verbose` (`-v`).
    #[arg(long, value_name = "SPEC", value_parser = parse_mirror)]
    pub mirror: Option<rdpipe_copy::mirror::Mirror>,
    /// Log level as for rdpipe's `-v` count: 2 debug, 3 trace.
    #[arg(long, default_value_t = 0)]
    pub verbose: u8,
    /// Errors only (rdpipe's `-q`).
    #[arg(long)]
    pub quiet: bool,
    /// A log filter (`RUST_LOG` syntax, rdpipe's own `RUST_LOG`), overriding
    /// `--verbose`.
    #[arg(long, allow_hyphen_values = true, value_name = "FILTER")]
    pub log: Option<String>,
}

impl AgentArgs {
    /// Settings for an agent labelled `label` with these links, every other
    /// field at the value the agent assumes when its flag is absent, and no
    /// action yet (the agent needs exactly one: `cmd`, `read`, `write`,
    /// `append`, `relay`, `pack`, `unpack`, `list` or `save_listing`).
    pub fn new(label: String, input: Link, output: Link) -> AgentArgs {
        let mut a = <AgentArgs as clap::Parser>::try_parse_from([
            "rdrecv --agent",
            "--input=none",
            "--output=none",
            "--relay",
        ])
        .expect("the defaults parse");
        a.relay = false;
        a.label = label;
        a.input = input;
        a.output = output;
        a
    }

    /// The words after `--agent` that make the agent parse back exactly these
    /// settings. The links, the tuning and the protection are always written
    /// (the agent's defaults need not be rdpipe's); the rest only where it is
    /// not the agent's default, which keeps the usual command line short.
    pub fn to_argv(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        let mut val = |flag: &str, value: &dyn std::fmt::Display| {
            v.push(format!("--{flag}"));
            v.push(value.to_string());
        };
        val("label", &self.label);
        val("input", &self.input.as_str());
        val("output", &self.output.as_str());
        val("chunk-size", &self.chunk_size);
        val("slots", &self.slots);
        val("transport", &crate::transport_name(self.transport));
        val("connect-timeout", &self.connect_timeout);
        val("handshake-timeout", &self.handshake_timeout);
        val("reconnect-timeout", &self.reconnect_timeout);
        if self.reattach > 0 {
            val("reattach", &self.reattach);
        }
        val("reconnect-window", &self.reconnect_window);
        val("integrity", &self.integrity.as_str());
        if let Some(r) = self.rate_limit {
            val("rate-limit", &r.bytes_per_sec());
        }
        if self.compress != Compress::None {
            val("compress", &self.compress);
        }
        if self.verbose > 0 {
            val("verbose", &self.verbose);
        }
        let on = |v: &mut Vec<String>, flag: &str, set: bool| {
            if set {
                v.push(format!("--{flag}"));
            }
        };
        on(&mut v, "quiet", self.quiet);
        on(&mut v, "direct", self.direct);
        let opt = |v: &mut Vec<String>, flag: &str, value: &Option<String>| {
            if let Some(x) = value {
                v.extend([format!("--{flag}"), x.clone()]);
            }
        };
        opt(&mut v, "log", &self.log);
        opt(&mut v, "in-addr", &self.in_addr);
        opt(&mut v, "out-addr", &self.out_addr);
        on(&mut v, "sink", self.sink);
        if self.replay_window > 0 {
            v.extend(["--replay-window".into(), self.replay_window.to_string()]);
        }
        on(&mut v, "chain-in", self.chain_in);
        for l in &self.lanes {
            v.extend(["--lane".into(), l.as_str().into()]);
        }
        if let Some(n) = self.lanes_needed {
            v.extend(["--lanes-needed".into(), n.to_string()]);
        }
        opt(&mut v, "lane-addr", &self.lane_addr);
        for t in &self.lane_tags {
            v.extend(["--lane-tag".into(), t.clone()]);
        }
        opt(&mut v, "source-host", &self.source_host);
        if self.source_index > 0 {
            v.extend(["--source-index".into(), self.source_index.to_string()]);
        }
        if let Some(s) = &self.spool {
            v.extend(["--spool".into(), s.to_string()]);
        }
        // What the segment does.
        opt(&mut v, "cmd", &self.cmd);
        opt(&mut v, "read", &self.read);
        opt(&mut v, "write", &self.write);
        opt(&mut v, "append", &self.append);
        on(&mut v, "relay", self.relay);
        opt(&mut v, "save-listing", &self.save_listing);
        opt(&mut v, "forward-listen", &self.forward_listen);
        on(&mut v, "forward-once", self.forward_once);
        if let Some(n) = self.forward_max {
            v.extend(["--forward-max".into(), n.to_string()]);
        }
        opt(&mut v, "forward-target", &self.forward_target);
        for p in &self.pack {
            v.extend(["--pack".into(), p.clone()]);
        }
        on(&mut v, "recursive", self.recursive);
        on(&mut v, "xattrs", self.xattrs);
        on(&mut v, "glob", self.glob);
        opt(&mut v, "list", &self.list);
        opt(&mut v, "unpack", &self.unpack);
        for t in &self.top {
            v.extend(["--top".into(), t.clone()]);
        }
        on(&mut v, "must-be-dir", self.must_be_dir);
        on(&mut v, "checksum", self.checksum);
        on(&mut v, "preserve", self.preserve);
        on(&mut v, "no-setid", self.no_setid);
        on(&mut v, "specials", self.specials);
        opt(&mut v, "manifest", &self.manifest);
        if let Some(s) = &self.stripe {
            v.extend(["--stripe".into(), s.to_string()]);
        }
        on(&mut v, "munge", self.munge);
        if let Some(p) = &self.munge_socket {
            v.extend(["--munge-socket".into(), p.display().to_string()]);
        }
        if let Some(m) = &self.mirror {
            v.extend(["--mirror".into(), m.to_string()]);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use proptest::prelude::*;

    fn parse(argv: &[String]) -> AgentArgs {
        AgentArgs::try_parse_from(
            std::iter::once("rdrecv --agent".to_string()).chain(argv.iter().cloned()),
        )
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"))
    }

    #[test]
    fn defaults_round_trip_in_a_short_line() {
        let mut a = AgentArgs::new("h[1]".into(), Link::Listen, Link::Connect);
        a.cmd = Some("cat".into());
        let argv = a.to_argv();
        assert_eq!(argv.len(), 24, "{argv:?}");
        assert_eq!(parse(&argv), a);
    }

    /// Every setting but the action at a value other than its default.
    fn tuned() -> AgentArgs {
        let mut a = AgentArgs::new("-h [2]".into(), Link::Connect, Link::Listen);
        a.in_addr = Some("10.0.0.1".into());
        a.out_addr = Some("fe80::1".into());
        a.chunk_size = 1 << 20;
        a.slots = 3;
        a.transport = TransportPref::Rdma;
        a.integrity = Integrity::Mac;
        a.handshake_timeout = 7;
        a.rate_limit = "16M".parse().ok();
        a.compress = Compress::Zstd(5);
        a.connect_timeout = 9;
        a.reconnect_timeout = 0;
        a.reattach = 7;
        a.reconnect_window = 12345;
        a.direct = true;
        a.sink = true;
        a.replay_window = 1 << 20;
        a.chain_in = true;
        a.munge = true;
        a.munge_socket = Some("/run/munge/m.socket".into());
        a.verbose = 3;
        a.quiet = true;
        a.log = Some("rdpipe=debug".into());
        a.lanes = vec![Link::Listen, Link::Connect];
        a.lanes_needed = Some(1);
        a.lane_addr = Some("10.0.0.2".into());
        a.lane_tags = vec!["pc1: ".into(), "-x[2]: ".into()];
        a.source_host = Some("pc1".into());
        a.source_index = 3;
        a.spool = "64M:/var/tmp".parse().ok();
        a
    }

    #[test]
    fn every_field_round_trips_with_every_action() {
        let stripe = rdpipe_copy::stripe::Stripe::parse("2/4/0123456789abcdef");
        assert!(stripe.is_some());
        let mut actions: Vec<AgentArgs> = Vec::new();
        let mut with = |f: &dyn Fn(&mut AgentArgs)| {
            let mut a = tuned();
            f(&mut a);
            actions.push(a);
        };
        with(&|a| a.cmd = Some("-n 'x y' | tr a-z A-Z".into()));
        with(&|a| a.read = Some("--weird name".into()));
        with(&|a| a.write = Some("/tmp/a b".into()));
        with(&|a| a.append = Some("/tmp/c".into()));
        with(&|a| a.relay = true);
        with(&|a| a.save_listing = Some("ab12".into()));
        with(&|a| {
            a.pack = vec!["-a".into(), "b c".into()];
            a.recursive = true;
            a.xattrs = true;
            a.glob = true;
            a.specials = true;
            a.manifest = Some("00ff".into());
            a.stripe = stripe;
        });
        with(&|a| {
            a.pack = vec!["src".into()];
            a.recursive = true;
            a.mirror = rdpipe_copy::mirror::Mirror::parse("dry-run");
        });
        with(&|a| {
            a.list = Some("/dest".into());
            a.mirror = rdpipe_copy::mirror::Mirror::parse("delete");
        });
        with(&|a| {
            a.list = Some("/dest".into());
            a.checksum = true;
            a.must_be_dir = true;
            a.top = vec!["t1".into(), "-t2".into()];
        });
        with(&|a| {
            a.unpack = Some("/d".into());
            a.top = vec!["t".into()];
            a.must_be_dir = true;
            a.preserve = true;
            a.no_setid = true;
            a.specials = true;
            a.stripe = stripe;
        });
        with(&|a| {
            a.unpack = Some("/d".into());
            a.preserve = true;
            a.mirror = rdpipe_copy::mirror::Mirror::parse("delete,force,verbose");
        });
        for a in actions {
            assert_eq!(parse(&a.to_argv()), a);
        }
    }

    proptest! {
        #[test]
        fn commands_and_paths_round_trip(cmd in ".{0,40}", path in "[^\0]{1,40}", label in "[^\0]{0,20}",
                                         which in 0..3usize, chunk in 1u32.., slots in 1u32..64,
                                         window in 0usize..1 << 40) {
            let mut a = AgentArgs::new(label, Link::None, Link::Listen);
            match which {
                0 => a.cmd = Some(cmd),
                1 => a.write = Some(path),
                _ => a.pack = vec![path, cmd],
            }
            a.chunk_size = chunk;
            a.slots = slots;
            a.replay_window = window;
            prop_assert_eq!(parse(&a.to_argv()), a);
        }
    }
}
