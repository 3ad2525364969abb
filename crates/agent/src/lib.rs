//! The endpoint agent: what runs on each host for one segment of a pipeline
//! (`rdrecv --agent ...` over SSH, `rdpipe --agent ...` for local segments).
//!
//! One agent per segment (a line merge's lanes are run by their merge
//! segment's agent, [`gather`]). It owns the segment's incoming transfer (a receiver),
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
//! - [`gather`]: a line merge's segment (`--from`): one receiving lane per
//!   source, their whole lines merged into the segment's input ([`merge`]:
//!   the turns, long lines, each lane's writer); [`spool`]: `--spool`;
//! - [`forward`]: `rdpipe forward`'s listening and target sides: TCP
//!   connections carried as frames over the segment's two hops;
//! - [`passthrough`]: a relay-only segment (`HOST:`): the incoming stream
//!   forwarded to the outgoing transfer, no command;
//! - [`inbox`]: rdpipe's control lines, the silence watchdog, signals, and
//!   the channel given up and taken over again with `--reattach`;
//! - [`attach`]: the re-attach socket, the new channel's hand-over and its
//!   secret; [`stderr_relay`]: stderr through a pipe while the channel may
//!   be lost;
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
//! [`rdpipe_control::CONTROL_SILENCE`], or on SIGTERM/SIGINT/SIGHUP; with
//! `--reattach SECS`, a channel that closes without `BYE` or goes silent is
//! waited past for SECS instead ([`attach`]); a data peer
//! that goes silent is detected by the transport (TCP keepalive and user
//! timeout, 30 s).

pub mod attach;
pub mod command;
pub mod copy;
pub mod file;
pub mod forward;
pub mod gather;
pub mod guard;
pub mod home;
pub mod inbox;
pub mod inventory;
pub mod merge;
pub mod passthrough;
pub mod reach;
pub mod relay;
pub mod say;
pub mod segment;
pub mod shell;
pub mod spool;
pub mod stderr_relay;
pub mod transfers;
pub mod trust;
pub mod usage;

/// If `args` (without the program name) start with one of the internal modes
/// (`--agent`, `--ssh-guard`, `--cmd-guard`, `--agent-protocol`,
/// `--doctor-probe`, `--agent-attach`), runs it and returns its exit status. `rdpipe`, `rdrecv`
/// and `rdcp` call this first.
pub fn internal_mode(args: &[OsString]) -> Option<ExitCode> {
    match args.first().and_then(|a| a.to_str()) {
        Some("--agent") => Some(main(args[1..].iter().cloned())),
        Some("--ssh-guard") => Some(guard::main(args[1..].iter().cloned())),
        Some("--cmd-guard") => Some(guard::cmd_main(args[1..].iter().cloned())),
        Some("--agent-protocol") => Some(rdpipe_control::agent_id::print_agent_id()),
        Some("--doctor-probe") => Some(inventory::main(args[1..].iter().cloned())),
        Some("--agent-attach") => Some(attach::helper_main(args[1..].iter().cloned())),
        _ => None,
    }
}

use rdpipe_control::Link;
use rdpipe_control::{Direction, FailKind, FromAgent, KeyLine, Part, PROTOCOL};
use rdpipe_wire::TransportPref;
use say::{Meter, Say};
use segment::Segment;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader};
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::Duration;
use transfers::Transfers;

pub use rdpipe_control::AgentArgs;

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

/// With `--reattach`: the attach socket and the stderr relay, or why not
/// (the agent then ends with its channel, as without).
fn detachable(secs: u64) -> Option<inbox::Detach> {
    if secs == 0 {
        return None;
    }
    let listener = match attach::Listener::open() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(
                "cannot make the re-attach socket: {e}; this agent ends with its ssh session"
            );
            return None;
        }
    };
    let stderr = match stderr_relay::StderrRelay::start() {
        Ok(r) => Arc::new(r),
        Err(e) => {
            tracing::warn!("cannot relay stderr: {e}; this agent ends with its ssh session");
            return None;
        }
    };
    Some(inbox::Detach {
        listener,
        wait: Duration::from_secs(secs),
        stderr,
    })
}

fn run(a: AgentArgs) -> bool {
    let say = Say::stdout();
    if a.reattach > 0 {
        // Every line, from the first: a re-attach resends from rdpipe's count.
        say.keep_log();
    }
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
    let detach = detachable(a.reattach);
    let relay = detach.as_ref().map(|d| d.stderr.clone());
    let socket = detach.as_ref().map(|d| d.listener.path().to_path_buf());
    if let Some(d) = &detach {
        say.send(&FromAgent::Detachable(
            d.listener.path().display().to_string(),
        ));
    }
    tracing::debug!("started: input {:?}, output {:?}", a.input, a.output);
    let meter = Arc::new(Meter::new(&say));
    let say_end = say.clone();
    let (tx, rx) = mpsc::channel();
    let silence = rdpipe_control::control_silence(a.reconnect_timeout);
    let orders = inbox::listen(
        a.lanes.len(),
        stdin,
        opener,
        &tx,
        &meter,
        &say,
        fabric,
        silence,
        detach,
    );
    let mut shared = command::Shared::default();
    if let Some(host) = &a.source_host {
        shared.env = vec![
            ("RDPIPE_SOURCE".into(), host.clone()),
            ("RDPIPE_SOURCE_INDEX".into(), a.source_index.to_string()),
        ];
    }
    let shared = Arc::new(shared);
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
        spool: a.spool.clone(),
        chain: keys.chain.map(|secret| transfers::ChainPart {
            secret,
            window: a.replay_window,
            chain_in: a.chain_in,
        }),
    };
    if !a.lanes.is_empty() {
        gather::start_merge(&a, keys.lanes, &mut seg, &mut t, &shared);
    } else if a.relay {
        passthrough::start(&mut seg, &mut t);
    } else if a.sink {
        relay::start_sink(&a, &mut seg, &mut t, &shared);
    } else if let Some(cmd) = &a.cmd {
        let with_input = seg.pending(Direction::In);
        let with_output = seg.pending(Direction::Out);
        // The last segment of a `--from --each` instance: its stdout is
        // shown on rdpipe's stderr (our stdout is the control channel).
        let started = if a.source_host.is_some() && !with_output {
            command::start_with(cmd, with_input, command::stdout_to_stderr(), &shared)
        } else {
            command::start(cmd, with_input, with_output, &shared)
        };
        match started {
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
        let sources = copy::Sources {
            paths: &a.pack,
            glob: a.glob,
        };
        copy::start_pack(
            sources,
            opts,
            a.manifest.as_deref(),
            a.mirror,
            a.quiet,
            &mut seg,
            &mut t,
        );
    } else if let Some(run) = &a.save_listing {
        copy::start_save_listing(run, &mut seg, &mut t);
    } else if let Some(dest) = &a.list {
        copy::start_list(
            dest,
            a.must_be_dir,
            &a.top,
            a.checksum,
            a.mirror.is_some(),
            &mut seg,
            &mut t,
        );
    } else if let Some(dest) = &a.unpack {
        copy::start_unpack(dest, &a, &mut seg, &mut t);
    } else if let Some(addr) = &a.forward_listen {
        let stop = std::mem::replace(&mut t.orders.stop, mpsc::channel().1);
        forward::start_listen(addr, a.forward_once, a.forward_max, stop, &mut seg, &mut t);
    } else if let Some(to) = &a.forward_target {
        let timeout = Duration::from_secs(a.connect_timeout);
        forward::start_target(to, timeout, &mut seg, &mut t);
    }
    drop(t);
    let ok = seg.run(rx);
    // Lines the lost channel did not carry (the last ones, `END`) reach
    // rdpipe through a re-attach, if one comes in time.
    say_end.linger(Duration::from_secs(a.reattach));
    // What is still in the stderr pipe (the lines a failure's `FAIL` points
    // to: "cannot write FILE") reaches the channel before the process ends.
    if let Some(r) = relay {
        r.finish();
    }
    if let Some(p) = socket {
        attach::remove(&p);
    }
    if !ok {
        // Not dropping the segment: after a failure its threads may be
        // blocked in network I/O.
        std::process::exit(1);
    }
    ok
}
