//! The pipeline plan: `HOST:CMD` arguments parsed into a plain [`Pipeline`] value
//! (segments, hosts, who listens and who connects to whom, data addresses) before
//! any process exists. `rdpipe -n` prints it, and the unit tests check it.
//!
//! # Argument syntax
//!
//! - `HOST:CMD`: run the shell command `CMD` (`sh -c CMD`) on `HOST` over SSH.
//!   `HOST` is everything before the first `:`; it may be `user@host` and may name
//!   an alias from the ssh configuration.
//! - `[HOST]:CMD`: the bracketed form, for a port (`[user@host:2222]:CMD`) or an
//!   IPv6 address (`[fe80::1]:CMD`; a port is recognised only when the brackets
//!   hold exactly one `:`).
//! - `-:CMD` or `localhost:CMD`: run `CMD` on the local machine, without SSH.
//!   (`user@localhost` or `127.0.0.1` do go through SSH.)
//! - `HOST:'< FILE'`: the segment reads `FILE` on `HOST` and sends it downstream. In
//!   the middle of a pipeline the previous segment's output is received in full
//!   (and verified) but discarded, and a new stream starts from the file.
//! - `HOST:'> FILE'`, `HOST:'>> FILE'`: the segment writes the stream into `FILE`
//!   (truncating or appending). In the middle of a pipeline an empty stream is sent
//!   onward; at the end nothing comes back to rdpipe's standard output.
//! - `HOST:` (an empty or blank command): relay only. The segment's agent
//!   forwards the stream it receives, as it arrives, to the next hop's transfer:
//!   no shell, no command, no pipe (see `agent/passthrough.rs`). Its outgoing
//!   stream ends cleanly only once the incoming one verified. It needs an input
//!   (a segment before it, or rdpipe's standard input) and cannot be a `--to`
//!   sink.
//!
//! `FILE` is taken literally (one pair of surrounding quotes is removed; a leading
//! `~/` means the home directory on that host); relative paths are relative to the
//! home directory for SSH hosts and to the current directory for local segments.
//!
//! # Connections
//!
//! The data travels as rdsend→rdrecv style transfers, one per hop, host to host;
//! only rdpipe's own standard input and output pass through rdpipe. Every listening
//! end binds an ephemeral port (never a fixed one) and announces it over its SSH
//! channel; rdpipe tells the other end where to connect. Who listens:
//!
//! - a remote downstream end listens, the upstream end connects to it (at the
//!   downstream host's data address, or 127.0.0.1 when both ends share a host);
//! - when the downstream end is local (rdpipe's standard output or a local
//!   segment) and the upstream end is remote, the remote sender listens and the
//!   local end connects: the local machine only ever connects outward, so rdpipe
//!   works from behind NAT or a firewall;
//! - rdpipe's own ends never listen; between two local segments the downstream one
//!   listens on loopback.
//!
//! A host's data address is `--data-host HOST=ADDR` if given, else the HostName
//! that the ssh configuration gives it (`ssh -G`), else the name as written.

use std::fmt;

mod fanout;
mod forward;
mod gather;
pub mod hostlist;
mod parse;
pub use fanout::plan_fanout;
pub use forward::{plan_forward, ForwardSpec, DEFAULT_BIND};
pub use gather::{expand_source_path, plan_gather, Gather, GatherMode, Source};
pub use parse::{parse_data_host, parse_segment, quotes_balanced};

/// Where a segment runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// On this machine, without SSH (`-:CMD`, `localhost:CMD`).
    Local,
    /// On a host reached over SSH.
    Remote(RemoteHost),
}

/// An SSH destination as written on the command line.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteHost {
    /// The host part as the user wrote it (used as the label in messages).
    pub spec: String,
    /// `user` of `user@host`.
    pub user: Option<String>,
    /// The host name, address or ssh-config alias.
    pub name: String,
    /// Port from the bracketed form.
    pub port: Option<u16>,
}

impl RemoteHost {
    /// The destination argument for ssh (`[user@]name`).
    pub fn destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.name),
            None => self.name.clone(),
        }
    }
}

impl Host {
    /// The label used in messages and as the stderr prefix.
    pub fn label(&self) -> &str {
        match self {
            Host::Local => "local",
            Host::Remote(r) => &r.spec,
        }
    }

    /// Whether this is a local segment.
    pub fn is_local(&self) -> bool {
        matches!(self, Host::Local)
    }
}

/// What a segment does with the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `sh -c CMD`: stdin is the incoming stream, stdout the outgoing one.
    Command(String),
    /// `< FILE`: discard the incoming stream, send the file.
    ReadFile(String),
    /// `> FILE` / `>> FILE`: write the incoming stream to the file, send nothing.
    WriteFile {
        /// The file.
        path: String,
        /// `>>`.
        append: bool,
    },
    /// `HOST:` (empty command): forward the incoming stream to the next hop,
    /// unchanged, without a command.
    Relay,
    /// A `--from` source's lane into a line merge: receives source
    /// `source`'s stream (1-based) inside the merge segment's agent (see
    /// `plan/gather.rs`); never an agent of its own.
    Lane {
        /// The source's index (1-based).
        source: usize,
    },
    /// `rdpipe forward`'s listening side: accepts TCP connections at
    /// `addr` (BIND:PORT) and carries them over its two hops (see
    /// `plan/forward.rs`).
    ForwardListen {
        /// Where to listen.
        addr: String,
        /// `--once`: end after the first connection.
        once: bool,
        /// `--max-connections`.
        max: Option<usize>,
    },
    /// `rdpipe forward`'s target side: connects each forwarded connection
    /// to `to` (ADDR:PORT, as its host resolves it).
    ForwardTarget {
        /// Where to connect.
        to: String,
    },
    /// rdcp's source side: these paths sent as an entry stream
    /// (`rdpipe_copy::pack`); directories only with `recursive`.
    Pack {
        /// The source operands, as given (on this segment's host).
        sources: Vec<String>,
        /// `-r`.
        recursive: bool,
        /// `--xattrs`: extended attributes (user.*, ACLs) travel too.
        xattrs: bool,
        /// `--specials`: FIFOs, sockets and device nodes travel too.
        specials: bool,
        /// The sources are remote operands: their wildcards (`*`, `?`,
        /// `[...]`) are expanded on this host (`rdpipe_copy::glob`), as
        /// scp's are; local ones are the local shell's.
        glob: bool,
        /// `--resume`: the id of the copy whose private directory on this
        /// host holds the destination's listing (`rdpipe_copy::private`;
        /// read, then removed); what it lists complete is not sent.
        manifest: Option<String>,
        /// `--streams`: which of the copy's streams this is.
        stripe: Option<rdpipe_copy::stripe::Stripe>,
        /// `--delete`: name every entry, sent or not (`rdpipe_copy::mirror`).
        mirror: Option<rdpipe_copy::mirror::Mirror>,
    },
    /// `rdcp --resume`'s first step, on the destination's host: list what
    /// `dest` already holds where the sources named `tops` will land
    /// (`rdpipe_copy::list`).
    List {
        /// The destination operand.
        dest: String,
        /// As for [`Action::Unpack`].
        must_be_dir: bool,
        /// Patterns of the sources' last components (`rdpipe_copy::glob`;
        /// a literal name escaped): what the listing covers in `dest`.
        tops: Vec<String>,
        /// `--checksum`: each complete file's content hash too.
        checksum: bool,
        /// `--delete`: the one source lands as `dest` itself.
        mirror: bool,
    },
    /// `rdcp --resume`'s first step, on the sources' host: the listing that
    /// comes in saved in copy `run`'s private directory there
    /// (`rdpipe_copy::private`), for that copy's packer.
    SaveListing {
        /// The copy's id (32 hex digits).
        run: String,
    },
    /// rdcp's destination side: the entry stream created beneath `dest`
    /// (`rdpipe_copy::Unpacker`).
    Unpack {
        /// The destination operand (on this segment's host).
        dest: String,
        /// `dest` must be an existing directory (several sources, or a trailing `/`).
        must_be_dir: bool,
        /// `-p`: keep modes and times (and owners as root).
        preserve: bool,
        /// `--no-setid`: with `preserve`, files lose their set-uid and
        /// set-gid bits.
        no_setid: bool,
        /// `--specials`: create the FIFOs, sockets and device nodes the
        /// stream carries (without it, a stream with one is refused).
        specials: bool,
        /// `--resume` of one source with this name: see
        /// `rdpipe_copy::unpack::is_resumed_as`.
        resumed_top: Option<String>,
        /// `--streams`: which of the copy's streams this is.
        stripe: Option<rdpipe_copy::stripe::Stripe>,
        /// `--delete`: `dest` becomes a mirror of the one source
        /// (`rdpipe_copy::mirror`).
        mirror: Option<rdpipe_copy::mirror::Mirror>,
    },
}

impl Action {
    /// Whether the segment runs a shell command.
    pub fn is_command(&self) -> bool {
        matches!(self, Action::Command(_))
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Command(c) => write!(f, "{c}"),
            Action::ReadFile(p) => write!(f, "< {p}"),
            Action::WriteFile { path, append } => {
                write!(f, "{} {path}", if *append { ">>" } else { ">" })
            }
            // What follows the `:` (the argument as written, trimmed).
            Action::Relay => Ok(()),
            Action::Lane { source } => write!(f, "lane of source {source}"),
            Action::Pack { sources, .. } => write!(f, "rdcp from {}", sources.join(" ")),
            Action::Unpack { dest, .. } => write!(f, "rdcp to {dest}"),
            Action::List { dest, .. } => write!(f, "rdcp: list {dest}"),
            Action::SaveListing { .. } => write!(f, "rdcp: save the listing"),
            Action::ForwardListen { addr, .. } => write!(f, "forward: listen on {addr}"),
            Action::ForwardTarget { to } => write!(f, "forward: connect to {to}"),
        }
    }
}

/// One `HOST:CMD` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Where it runs.
    pub host: Host,
    /// What it runs.
    pub action: Action,
}

/// An end of a hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// rdpipe's standard input (sent by rdpipe itself).
    Stdin,
    /// Segment number `n` (0-based).
    Segment(usize),
    /// rdpipe's standard output (received by rdpipe itself).
    Stdout,
}

pub use rdpipe_control::Link;

/// One transfer between two neighbours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// Sending end.
    pub from: Node,
    /// Receiving end.
    pub to: Node,
    /// The end that listens (the other connects).
    pub listener: Node,
    /// The address the connecting end uses to reach the listener.
    pub address: String,
}

impl Hop {
    /// The end that connects.
    pub fn connector(&self) -> Node {
        if self.listener == self.from {
            self.to
        } else {
            self.from
        }
    }

    /// Which of `node`'s transfers this hop is (`in` when it ends there, `out`
    /// when it starts there), if it touches `node` at all.
    pub fn side_of(&self, node: Node) -> Option<rdpipe_control::Direction> {
        use rdpipe_control::Direction;
        if self.to == node {
            Some(Direction::In)
        } else if self.from == node {
            Some(Direction::Out)
        } else {
            None
        }
    }
}

/// The whole pipeline, decided before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    /// The segments, in order.
    pub segments: Vec<Segment>,
    /// The transfers between neighbours (including rdpipe's stdin and stdout).
    pub hops: Vec<Hop>,
    /// With `--to` sinks: the first sink's index (the segments from it on are
    /// sinks, each relaying to the next; see `plan/fanout.rs`).
    pub first_sink: Option<usize>,
    /// With `--from` sources: who they are and how they are gathered (see
    /// `plan/gather.rs`).
    pub gather: Option<Gather>,
}

/// A malformed argument (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No segments at all.
    #[error("no HOST:CMD arguments given")]
    Empty,
    /// No `:`.
    #[error("'{0}' is not HOST:CMD (no ':')")]
    NoColon(String),
    /// `doctor` after an option (`rdpipe -v doctor HOST`): it is a
    /// subcommand only as the first argument.
    #[error("'doctor' must be rdpipe's first argument, before its options: rdpipe doctor [OPTIONS] HOST...")]
    DoctorNotFirst,
    /// Empty host part.
    #[error("empty host in '{0}'")]
    EmptyHost(String),
    /// Host that ssh would misread.
    #[error("bad host '{host}' in '{arg}': {why}")]
    BadHost {
        /// The host part.
        host: String,
        /// The whole argument.
        arg: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A relay-only segment (`HOST:`) with nothing to relay.
    #[error("'{0}' relays its input to the next segment, but it has none (rdpipe's standard input is a terminal): put a segment before it or give data on standard input, or write a command after the ':'")]
    RelayWithoutInput(String),
    /// A `--to` sink with an empty command.
    #[error("--to '{0}': a sink needs a command or '> FILE' after the ':' (an empty command means relay only, which only a plain pipeline's segment can be)")]
    SinkRelays(String),
    /// Unbalanced quotes or a trailing backslash.
    #[error("unbalanced quotes in '{0}'")]
    Unbalanced(String),
    /// `<` or `>` with no file.
    #[error("missing file name after '{op}' in '{arg}'")]
    MissingFile {
        /// The operator.
        op: &'static str,
        /// The whole argument.
        arg: String,
    },
    /// A `--to` sink that reads a file.
    #[error("--to '{0}': a sink receives the stream, it cannot read a file ('< FILE'); put the source before the --to sinks")]
    SinkReads(String),
    /// `--to` sinks without a source.
    #[error("--to sinks need a source: HOST:CMD segments before them, or data on rdpipe's standard input (not a terminal)")]
    NoSource,
    /// A hostlist (`n[01-16]`) that does not parse.
    #[error("host list '{list}': {why}")]
    BadHostList {
        /// The list as written.
        list: String,
        /// What is wrong.
        why: String,
    },
    /// A `--from` source that writes a file.
    #[error("--from '{0}': a source sends a stream, it cannot write a file ('> FILE'); put the file in a segment after the sources")]
    SourceWrites(String),
    /// A `--from` source with an empty command.
    #[error("--from '{0}': a source needs a command or '< FILE' after the ':'")]
    SourceRelays(String),
    /// The first segment after `--from` sources reads a file.
    #[error("'{0}': the first segment after the --from sources receives the gathered stream, it cannot read a file ('< FILE')")]
    GatherSinkReads(String),
    /// `--each` without a sink segment.
    #[error("--each runs the sink segments once per source: give at least one HOST:CMD after the --from sources")]
    EachWithoutSink,
    /// `--each` instances that would write one file.
    #[error("--each: '{arg}' would write {path} for more than one source (their streams would replace or interleave each other): name the file by source with %h (host) or %i (index)")]
    EachSameFile {
        /// The sink segment as written.
        arg: String,
        /// The file, as expanded.
        path: String,
    },
    /// `--from` and `--to` together.
    #[error("--from and --to cannot be used in one run (many hosts into one, or one into many)")]
    FromAndTo,
    /// A forward's PORT that is not a port number.
    #[error("'{0}': the port must be a number from 1 to 65535 (0 to listen on any free port)")]
    ForwardPort(String),
    /// A forward's target that is not `HOST:ADDR:PORT`.
    #[error("'{0}' is not TARGET_HOST:ADDR:PORT (the address as the target host sees it, e.g. h2:localhost:5432)")]
    ForwardTarget(String),
    /// A forward's `--bind` that is not an address.
    #[error("--bind '{0}' is not an address")]
    ForwardBind(String),
    /// A `--data-host` value that is not `HOST=ADDR`.
    #[error("--data-host '{0}' is not HOST=ADDR")]
    BadDataHost(String),
}

/// Builds the plan.
///
/// - `stdin_is_input`: rdpipe's standard input feeds the first segment (it is not a
///   terminal). Ignored when the first segment reads a file.
/// - `data_addr`: the address other machines use to reach a remote host's data
///   endpoints (`--data-host`, else the ssh configuration's HostName).
pub fn plan(
    args: &[String],
    stdin_is_input: bool,
    data_addr: &dyn Fn(&RemoteHost) -> String,
) -> Result<Pipeline, PlanError> {
    if args.is_empty() {
        return Err(PlanError::Empty);
    }
    let segments = args
        .iter()
        .map(|a| parse_segment(a))
        .collect::<Result<Vec<_>, _>>()?;
    let with_stdin = stdin_is_input && !matches!(segments[0].action, Action::ReadFile(_));
    if segments[0].action == Action::Relay && !with_stdin {
        return Err(PlanError::RelayWithoutInput(args[0].clone()));
    }
    let with_stdout = !matches!(
        segments[segments.len() - 1].action,
        Action::WriteFile { .. }
    );
    Ok(plan_chain(segments, with_stdin, with_stdout, data_addr))
}

/// The hops of a linear chain of `segments`, from rdpipe's stdin (`with_stdin`)
/// to its stdout (`with_stdout`).
pub fn plan_chain(
    segments: Vec<Segment>,
    with_stdin: bool,
    with_stdout: bool,
    data_addr: &dyn Fn(&RemoteHost) -> String,
) -> Pipeline {
    let n = segments.len();
    let mut nodes = Vec::with_capacity(n + 2);
    if with_stdin {
        nodes.push(Node::Stdin);
    }
    nodes.extend((0..n).map(Node::Segment));
    if with_stdout {
        nodes.push(Node::Stdout);
    }
    let hops = nodes
        .windows(2)
        .map(|w| hop_between(&segments, w[0], w[1], data_addr))
        .collect();
    Pipeline {
        segments,
        hops,
        first_sink: None,
        gather: None,
    }
}

/// The hop from `from` to `to`: rdpipe's own ends never listen, and the
/// local machine only connects outward: a remote downstream end listens; a
/// remote upstream end listens for a local downstream end; between two
/// local ends the downstream one listens on loopback.
pub(crate) fn hop_between(
    segments: &[Segment],
    from: Node,
    to: Node,
    data_addr: &dyn Fn(&RemoteHost) -> String,
) -> Hop {
    let host_of = |node: Node| match node {
        Node::Segment(i) => &segments[i].host,
        Node::Stdin | Node::Stdout => &Host::Local,
    };
    let (hf, ht) = (host_of(from), host_of(to));
    let listener = if to == Node::Stdout {
        from
    } else if from == Node::Stdin || !ht.is_local() || hf.is_local() {
        to
    } else {
        from
    };
    let connector_host = if listener == to { hf } else { ht };
    let address = match host_of(listener) {
        Host::Local => "127.0.0.1".to_string(),
        Host::Remote(r) => match connector_host {
            Host::Remote(c) if c == r => "127.0.0.1".to_string(),
            _ => data_addr(r),
        },
    };
    Hop {
        from,
        to,
        listener,
        address,
    }
}

impl Pipeline {
    /// `rdpipe forward`'s listening segment, when this pipeline is a
    /// forward.
    pub fn forward_listener(&self) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| matches!(s.action, Action::ForwardListen { .. }))
    }

    /// How segment `i` takes part in its incoming and outgoing hops.
    pub fn links(&self, i: usize) -> (Link, Link) {
        let me = Node::Segment(i);
        let side = |h: Option<&Hop>| match h {
            None => Link::None,
            Some(h) if h.listener == me => Link::Listen,
            Some(_) => Link::Connect,
        };
        (
            side(self.hops.iter().find(|h| h.to == me)),
            side(self.hops.iter().find(|h| h.from == me)),
        )
    }

    /// The hop into `node`, if any.
    pub fn hop_into(&self, node: Node) -> Option<&Hop> {
        self.hops.iter().find(|h| h.to == node)
    }

    /// The hop out of `node`, if any.
    pub fn hop_from(&self, node: Node) -> Option<&Hop> {
        self.hops.iter().find(|h| h.from == node)
    }

    /// A short name for a node in messages: `stdin`, `h1[2]`, `stdout`.
    pub fn node_name(&self, node: Node) -> String {
        match node {
            Node::Stdin => "rdpipe stdin".into(),
            Node::Stdout => "rdpipe stdout".into(),
            Node::Segment(i) => format!("[{}] {}", i + 1, self.segments[i].host.label()),
        }
    }

    /// The distinct remote hosts, in first-use order, with the indices of
    /// the segments that have an agent there (a line merge's lanes run in
    /// their merge segment's agent: not listed).
    pub fn remote_hosts(&self) -> Vec<(RemoteHost, Vec<usize>)> {
        let mut out: Vec<(RemoteHost, Vec<usize>)> = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            if matches!(s.action, Action::Lane { .. }) {
                continue;
            }
            if let Host::Remote(r) = &s.host {
                match out.iter_mut().find(|(h, _)| h == r) {
                    Some((_, v)) => v.push(i),
                    None => out.push((r.clone(), vec![i])),
                }
            }
        }
        out
    }

    /// The text `rdpipe -n` prints about the segments and transfers; `how`
    /// says how a segment on a host is started (the launcher's words).
    pub fn describe(&self, how: &dyn Fn(&Host) -> String) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "rdpipe plan: {} segment(s), {} transfer(s); nothing was run",
            self.segments.len(),
            self.hops.len()
        );
        let _ = writeln!(s, "segments:");
        for (i, seg) in self.segments.iter().enumerate() {
            let how = how(&seg.host);
            let what = match &seg.action {
                Action::Command(c) => format!("sh -c {c:?}"),
                Action::ReadFile(p) => format!("read file {p:?}"),
                Action::WriteFile { path, append } => format!(
                    "{} file {path:?}",
                    if *append { "append to" } else { "write" }
                ),
                Action::Relay if self.gather.as_ref().is_some_and(|g| g.merge == Some(i)) => {
                    "merge the sources' lines into one stream, no command".into()
                }
                Action::Relay => "relay only: forwards the stream unchanged, no command".into(),
                Action::Lane { source } => {
                    format!("lane of source {source}, run by the merge segment's agent")
                }
                Action::ForwardListen { addr, once, max } => format!(
                    "accept TCP connections on {addr}{}{}, each carried to the target over both transfers",
                    if *once { ", one only (--once)" } else { "" },
                    max.map(|m| format!(", at most {m} at once")).unwrap_or_default()
                ),
                Action::ForwardTarget { to } => {
                    format!("connect each forwarded connection to {to} (as this host resolves it)")
                }
                Action::List { dest, .. } => {
                    format!("list what {dest:?} holds (rdcp --resume)")
                }
                Action::SaveListing { .. } => {
                    "save the listing in this copy's private directory".into()
                }
                Action::Pack {
                    sources, recursive, ..
                } => format!(
                    "send {}{sources:?} as an rdcp stream",
                    if *recursive {
                        "the trees "
                    } else {
                        "the files "
                    }
                ),
                Action::Unpack {
                    dest,
                    preserve,
                    no_setid,
                    ..
                } => format!(
                    "create the rdcp stream's files beneath {dest:?}{}",
                    match (*preserve, *no_setid) {
                        (true, false) => ", keeping modes and times",
                        (true, true) => ", keeping modes less set-uid/set-gid, and times",
                        (false, _) => "",
                    }
                ),
            };
            let _ = writeln!(s, "  [{}] {:<16} {what}  ({how})", i + 1, seg.host.label());
        }
        let _ = writeln!(s, "transfers:");
        for h in &self.hops {
            let c = match h.connector() {
                Node::Stdin | Node::Stdout => "rdpipe".to_string(),
                n => self.node_name(n),
            };
            let _ = writeln!(
                s,
                "  {} -> {}: {} listens on an ephemeral port, {} connects to {}",
                self.node_name(h.from),
                self.node_name(h.to),
                self.node_name(h.listener),
                c,
                h.address
            );
        }
        self.describe_fanout(&mut s);
        self.describe_gather(&mut s);
        s
    }
}

#[cfg(test)]
mod tests;
