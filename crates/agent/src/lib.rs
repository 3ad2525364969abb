//! The endpoint agent: what runs on each host for one segment of a pipeline
//! (`rdrecv --agent ...` over SSH, `rdpipe --agent ...` for local segments).
//!
//! One agent per segment. It owns the segment's incoming transfer (a receiver),
//! its outgoing transfer (a sender) and its shell command (`SHELL -c CMD`, the
//! user's login shell as sshd would use it, in a process group of its own), or handles a `< FILE` / `> FILE` / `>> FILE`
//! operator itself. It talks to rdpipe over its SSH channel with the line
//! protocol of [`rdpipe_control`].
//!
//! - [`segment`]: the state machine (what is pending, the first failure, `END`);
//! - [`command`]: the command under its guardian, its held stdin and its stdout;
//! - [`shell`]: the user's login shell, which runs the command;
//! - [`file`]: the `< FILE` / `> FILE` actions;
//! - [`copy`]: rdcp's two sides (a tree packed into the stream, or unpacked from it);
//! - [`transfers`]: the incoming and outgoing transfer threads;
//! - [`relay`]: a `--to` sink: the incoming stream teed into the command and
//!   onward to the next sink;
//! - [`passthrough`]: a relay-only segment (`HOST:`): the incoming stream
//!   forwarded to the outgoing transfer, no command;
//! - [`inbox`]: rdpipe's control lines, the silence watchdog, signals;
//! - [`trust`]: with `--munge` (`--launcher srun`), the sealed channel's
//!   handshake: every line from rdpipe is then opened first;
//! - [`say`]: the control lines to rdpipe and the byte-count meter;
//! - [`usage`]: the CPU the agent and its command used (`USAGE`, before `END`);
//! - [`guard`]: the processes that tie an SSH master's life to rdpipe's and a
//!   command's life to its agent's;
//! - [`reach`]: probing a listening host's RDMA-capable addresses (`PROBE`);
//! - [`inventory`]: this host's fabric as `rdpipe doctor` and address
//!   discovery see it (`--doctor-probe`);
//! - [`internal_mode`]: the hidden modes `rdpipe` and `rdrecv` start in.
//!
//! The command's stderr is the agent's stderr (rdpipe prefixes it with the host),
//! and so are the agent's own messages and, with `--verbose 2` or `--log FILTER`
//! (rdpipe's `-vv` / `RUST_LOG`), its `tracing` log.
//!
//! The agent ends when its stdin closes, when rdpipe is silent for
//! [`rdpipe_control::CONTROL_SILENCE`], or on SIGTERM/SIGINT/SIGHUP; a data peer
//! that goes silent is detected by the transport (TCP keepalive and user
//! timeout, 30 s).

pub mod command;
pub mod copy;
pub mod file;
pub mod guard;
pub mod inbox;
pub mod inventory;
pub mod passthrough;
pub mod reach;
pub mod relay;
pub mod say;
pub mod segment;
pub mod shell;
pub mod transfers;
pub mod trust;
pub mod usage;

/// If `args` (without the program name) start with one of the internal modes
/// (`--agent`, `--ssh-guard`, `--cmd-guard`, `--agent-protocol`,
/// `--doctor-probe`), runs it and returns its exit status. `rdpipe`, `rdrecv`
/// and `rdcp` call this first.
pub fn internal_mode(args: &[OsString]) -> Option<ExitCode> {
    match args.first().and_then(|a| a.to_str()) {
        Some("--agent") => Some(main(args[1..].iter().cloned())),
        Some("--ssh-guard") => Some(guard::main(args[1..].iter().cloned())),
        Some("--cmd-guard") => Some(guard::cmd_main(args[1..].iter().cloned())),
        Some("--agent-protocol") => Some(rdpipe_control::agent_id::print_agent_id()),
        Some("--doctor-probe") => Some(inventory::main(args[1..].iter().cloned())),
        _ => None,
    }
}

use rdpipe_control::{Direction, FailKind, FromAgent, KeyLine, Part, PROTOCOL};
use rdpipe_plan::Link;
use rdpipe_wire::{Integrity, TransportPref};
use say::{Meter, Say};
use segment::Segment;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader};
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;
use transfers::Transfers;

/// The agent's command line (hidden; written by rdpipe).
#[derive(Debug, clap::Parser)]
#[command(name = "rdrecv --agent", about = "rdpipe endpoint agent (internal)")]
#[command(group(clap::ArgGroup::new("action").required(true).args(["cmd", "read", "write", "append", "relay", "pack", "unpack", "list", "save_listing"])))]
pub struct AgentArgs {
    /// Label for messages.
    #[arg(long, default_value = "agent")]
    pub label: String,
    /// The incoming transfer.
    #[arg(long, value_enum)]
    pub input: Link,
    /// The outgoing transfer.
    #[arg(long, value_enum)]
    pub output: Link,
    /// The address the incoming side listens at (the address its peer connects
    /// to; used when it is an IP address of this host).
    #[arg(long)]
    pub in_addr: Option<String>,
    /// Likewise for the outgoing side.
    #[arg(long)]
    pub out_addr: Option<String>,
    /// Chunk size in bytes.
    #[arg(long, default_value_t = rdpipe_wire::DEFAULT_CHUNK_SIZE)]
    pub chunk_size: u32,
    /// Buffers in flight.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// auto, tcp or rdma.
    #[arg(long, default_value = "auto", value_parser = rdpipe_control::parse_transport)]
    pub transport: TransportPref,
    /// auto, checksum, mac or encrypt (rdpipe always says which).
    #[arg(long, default_value = "auto", value_parser = rdpipe_control::parse_integrity)]
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
    /// Bytes each sending hop keeps until its receiver has them, to resume
    /// after a reconnect (rdpipe's `--replay-window`).
    #[arg(long, value_name = "BYTES", default_value_t = rdpipe_transport::endpoint::REPLAY_WINDOW)]
    pub reconnect_window: usize,
    /// Run `SHELL -c CMD` (the user's login shell).
    #[arg(long)]
    pub cmd: Option<String>,
    /// Send this file (`< FILE`).
    #[arg(long)]
    pub read: Option<String>,
    /// Write the stream into this file (`> FILE`).
    #[arg(long)]
    pub write: Option<String>,
    /// Append the stream to this file (`>> FILE`).
    #[arg(long)]
    pub append: Option<String>,
    /// Relay only (`HOST:`, an empty command): forward the incoming stream to
    /// the outgoing transfer, no command (see [`passthrough`]).
    #[arg(long)]
    pub relay: bool,
    /// rdcp's source side: send these paths as an entry stream (repeated).
    #[arg(long, value_name = "PATH")]
    pub pack: Vec<String>,
    /// With `--pack`: directories too (rdcp's `-r`).
    #[arg(long)]
    pub recursive: bool,
    /// With `--pack`: extended attributes too (rdcp's `--xattrs`).
    #[arg(long)]
    pub xattrs: bool,
    /// With `--pack`: FIFOs, sockets and device nodes too; with `--unpack`:
    /// create them (rdcp's `--specials`).
    #[arg(long)]
    pub specials: bool,
    /// With `--pack`: the destination's listing (`rdcp --resume`), in the
    /// private directory of the copy whose random id is RUN
    /// (`rdpipe_copy::private`), read and then removed.
    #[arg(long, value_name = "RUN")]
    pub manifest: Option<String>,
    /// `rdcp --resume`'s first step on the sources' host: save the incoming
    /// listing in a new private directory for the copy whose id is RUN.
    #[arg(long, value_name = "RUN")]
    pub save_listing: Option<String>,
    /// With `--pack`/`--unpack`: this is stream K of N of the copy whose
    /// random id is RUN (hex), rdcp's `--streams` (`rdpipe_copy::stripe`).
    #[arg(long, value_name = "K/N/RUN", value_parser = parse_stripe)]
    pub stripe: Option<rdpipe_copy::stripe::Stripe>,
    /// `rdcp --resume`'s first step: send the listing of what DEST holds.
    #[arg(long, value_name = "DEST")]
    pub list: Option<String>,
    /// With `--list`: each complete file's content hash too (rdcp's
    /// `--checksum`).
    #[arg(long)]
    pub checksum: bool,
    /// With `--list`: a source's last component (repeated); with `--unpack`,
    /// the one source's name of a resumed copy.
    #[arg(long, value_name = "NAME")]
    pub top: Vec<String>,
    /// rdcp's destination side: create the entry stream's files beneath DEST.
    #[arg(long, value_name = "DEST")]
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
    /// [`relay`]).
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
    /// The control channel is Slurm's step I/O (`--launcher srun`): agree
    /// its key through munge first and open every line from rdpipe
    /// ([`trust`], [`rdpipe_control::seal`]).
    #[arg(long)]
    pub munge: bool,
    /// With `--munge`: munged's socket (Slurm's `AuthInfo=socket=`); munge's
    /// default without.
    #[arg(long, value_name = "PATH", requires = "munge")]
    pub munge_socket: Option<std::path::PathBuf>,
    /// Log level as for rdpipe's `-v` count: 2 debug, 3 trace.
    #[arg(long, default_value_t = 0)]
    pub verbose: u8,
    /// Errors only (rdpipe's `-q`).
    #[arg(long)]
    pub quiet: bool,
    /// A log filter (`RUST_LOG` syntax, rdpipe's own `RUST_LOG`), overriding
    /// `--verbose`.
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,
}

/// `--stripe K/N/RUN`.
fn parse_stripe(s: &str) -> Result<rdpipe_copy::stripe::Stripe, String> {
    rdpipe_copy::stripe::Stripe::parse(s).ok_or_else(|| format!("{s}: not K/N/RUN"))
}

/// Runs the agent with `args` (the words after `--agent`) and returns its exit
/// status. This is the whole of `rdrecv --agent`.
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let args = match <AgentArgs as clap::Parser>::try_parse_from(
        std::iter::once(OsString::from("rdrecv --agent")).chain(args),
    ) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(2);
        }
    };
    rdpipe_term::init_logging_with(
        &format!("agent {}", args.label),
        args.verbose,
        args.quiet,
        args.log.as_deref(),
    );
    match run(args) {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    }
}

fn run(a: AgentArgs) -> bool {
    let say = Say::stdout();
    let mut stdin = BufReader::new(io::stdin());
    let refuse = |message: &dyn std::fmt::Display| {
        say.send(&FromAgent::fail(Part::Agent, FailKind::Error, 2, message));
        say.send(&FromAgent::End { ok: false });
        false
    };
    let mut opener = None;
    if a.munge {
        match trust::accept(&mut stdin, &say, a.munge_socket.as_deref()) {
            Ok(o) => opener = Some(o),
            Err(trust::TrustError::Closed) => return false,
            Err(e) => return refuse(&e),
        }
    }
    let mut key_line = String::new();
    if stdin.read_line(&mut key_line).unwrap_or(0) == 0 {
        return false;
    }
    if let Some(o) = opener.as_mut() {
        match o.open(&key_line) {
            Ok(l) => key_line = l,
            Err(e) => return refuse(&e),
        }
    }
    let keys = match key_line.trim().parse::<KeyLine>() {
        Ok(k) => k,
        Err(_) => return refuse(&"the first line on stdin is not the hops' keys"),
    };
    say.send(&FromAgent::Hello { version: PROTOCOL });
    // The host's RDMA-capable addresses, for rdpipe's data-address discovery
    // (none asked for with --transport tcp), before any PORT.
    let fabric = match a.transport {
        TransportPref::Tcp => vec![],
        _ => crate::inventory::rdma_networks(),
    };
    tracing::debug!("RDMA-capable addresses: {fabric:?}");
    say.send(&FromAgent::Fabric(fabric.clone()));
    tracing::debug!("started: input {:?}, output {:?}", a.input, a.output);
    let meter = Arc::new(Meter::new(&say));
    let (tx, rx) = mpsc::channel();
    let silence = rdpipe_control::control_silence(a.reconnect_timeout);
    let orders = inbox::listen(stdin, opener, &tx, &meter, &say, fabric, silence);
    let shared = Arc::new(command::Shared::default());
    let mut seg = Segment::new(
        say.clone(),
        shared.clone(),
        tx.clone(),
        [a.input != Link::None, a.output != Link::None],
    );
    let mut t = Transfers {
        keys: [
            keys.input.unwrap_or_default(),
            keys.output.unwrap_or_default(),
        ],
        addrs: [a.in_addr.clone(), a.out_addr.clone()],
        chunk_size: a.chunk_size,
        slots: a.slots,
        transport: a.transport,
        integrity: a.integrity,
        handshake_timeout: Duration::from_secs(a.handshake_timeout),
        rate_limit: a.rate_limit,
        compress: a.compress,
        connect_timeout: Duration::from_secs(a.connect_timeout),
        reconnect_timeout: Duration::from_secs(a.reconnect_timeout),
        reconnect_window: a.reconnect_window,
        links: [a.input, a.output],
        orders,
        meter,
        say,
        tx,
        chain: keys.chain.map(|secret| transfers::ChainPart {
            secret,
            window: a.replay_window,
            chain_in: a.chain_in,
        }),
    };
    if a.relay {
        passthrough::start(&mut seg, &mut t);
    } else if a.sink {
        relay::start_sink(&a, &mut seg, &mut t, &shared);
    } else if let Some(cmd) = &a.cmd {
        let with_input = seg.pending(Direction::In);
        let with_output = seg.pending(Direction::Out);
        match command::start(cmd, with_input, with_output, &shared) {
            Ok(started) => {
                if let Some(held) = started.input {
                    seg.held_input = Some(held.clone());
                    let w = held.clone();
                    t.spawn_recv(Box::new(move || Ok(Box::new(w) as _)), Some(held));
                }
                if let Some(out) = started.output {
                    t.spawn_send(out);
                }
                seg.command_started(started.child);
            }
            Err(e) => seg.setup_failed(Part::Cmd, format!("cannot start the shell: {e}")),
        }
    } else if let Some(path) = &a.read {
        file::start_read(path, &mut seg, &mut t);
    } else if let Some(path) = a.write.as_ref().or(a.append.as_ref()) {
        file::start_write(path, a.append.is_some(), a.direct, &mut seg, &mut t);
    } else if !a.pack.is_empty() {
        let opts = rdpipe_copy::PackOptions {
            recursive: a.recursive,
            xattrs: a.xattrs,
            specials: a.specials,
            direct: a.direct,
            stripe: a.stripe,
        };
        copy::start_pack(&a.pack, opts, a.manifest.as_deref(), &mut seg, &mut t);
    } else if let Some(run) = &a.save_listing {
        copy::start_save_listing(run, &mut seg, &mut t);
    } else if let Some(dest) = &a.list {
        copy::start_list(dest, a.must_be_dir, &a.top, a.checksum, &mut seg, &mut t);
    } else if let Some(dest) = &a.unpack {
        copy::start_unpack(dest, &a, &mut seg, &mut t);
    }
    drop(t);
    seg.run(rx)
}
