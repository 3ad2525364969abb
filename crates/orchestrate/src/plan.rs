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
}

/// The whole pipeline, decided before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    /// The segments, in order.
    pub segments: Vec<Segment>,
    /// The transfers between neighbours (including rdpipe's stdin and stdout).
    pub hops: Vec<Hop>,
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
    /// Empty command.
    #[error("empty command in '{0}'")]
    EmptyCommand(String),
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
    /// A `--data-host` value that is not `HOST=ADDR`.
    #[error("--data-host '{0}' is not HOST=ADDR")]
    BadDataHost(String),
}

/// Whether `s` has balanced quotes in the sense of sh: `'...'` (no escapes
/// inside), `"..."` (backslash escapes), and no trailing lone backslash.
pub fn quotes_balanced(s: &str) -> bool {
    #[derive(PartialEq)]
    enum St {
        Plain,
        Single,
        Double,
    }
    let mut st = St::Plain;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match st {
            St::Plain => match c {
                // An escaped character is consumed by the guard.
                '\\' if chars.next().is_none() => return false,
                '\'' => st = St::Single,
                '"' => st = St::Double,
                _ => {}
            },
            St::Single => {
                if c == '\'' {
                    st = St::Plain;
                }
            }
            St::Double => match c {
                '\\' if chars.next().is_none() => return false,
                '"' => st = St::Plain,
                _ => {}
            },
        }
    }
    st == St::Plain
}

fn parse_remote(host: &str, bracketed: bool, arg: &str) -> Result<RemoteHost, PlanError> {
    let bad = |why| PlanError::BadHost {
        host: host.to_string(),
        arg: arg.to_string(),
        why,
    };
    let (user, rest) = match host.rfind('@') {
        Some(at) => (Some(&host[..at]), &host[at + 1..]),
        None => (None, host),
    };
    if user == Some("") {
        return Err(bad("empty user name"));
    }
    let (name, port) = if bracketed && rest.matches(':').count() == 1 {
        let (n, p) = rest.split_once(':').expect("one colon");
        let port: u16 = p.parse().map_err(|_| bad("port is not a number"))?;
        if port == 0 {
            return Err(bad("port 0"));
        }
        (n, Some(port))
    } else {
        (rest, None)
    };
    if name.is_empty() {
        return Err(PlanError::EmptyHost(arg.to_string()));
    }
    if name.starts_with('-') || user.is_some_and(|u| u.starts_with('-')) {
        return Err(bad("must not start with '-'"));
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "'\"\\`$;&|<>()*?".contains(c))
    {
        return Err(bad("contains characters a host name cannot have"));
    }
    Ok(RemoteHost {
        spec: host.to_string(),
        user: user.map(str::to_string),
        name: name.to_string(),
        port,
    })
}

fn unquote_path(p: &str) -> &str {
    let b = p.as_bytes();
    if b.len() >= 2 && (b[0] == b'\'' || b[0] == b'"') && b[b.len() - 1] == b[0] {
        &p[1..p.len() - 1]
    } else {
        p
    }
}

/// Parses one `HOST:CMD` argument.
pub fn parse_segment(arg: &str) -> Result<Segment, PlanError> {
    let (host, cmd, bracketed) = if let Some(rest) = arg.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| PlanError::NoColon(arg.to_string()))?;
        let after = &rest[close + 1..];
        let cmd = after
            .strip_prefix(':')
            .ok_or_else(|| PlanError::NoColon(arg.to_string()))?;
        (&rest[..close], cmd, true)
    } else {
        let (h, c) = arg
            .split_once(':')
            .ok_or_else(|| PlanError::NoColon(arg.to_string()))?;
        (h, c, false)
    };
    if host.trim().is_empty() {
        return Err(PlanError::EmptyHost(arg.to_string()));
    }
    let host = if host == "-" || host == "localhost" {
        Host::Local
    } else {
        Host::Remote(parse_remote(host, bracketed, arg)?)
    };
    let cmd = cmd.trim();
    if cmd.is_empty() {
        return Err(PlanError::EmptyCommand(arg.to_string()));
    }
    if !quotes_balanced(cmd) {
        return Err(PlanError::Unbalanced(arg.to_string()));
    }
    let file = |op: &'static str, rest: &str| -> Result<String, PlanError> {
        let p = unquote_path(rest.trim());
        if p.is_empty() {
            Err(PlanError::MissingFile {
                op,
                arg: arg.to_string(),
            })
        } else {
            Ok(p.to_string())
        }
    };
    let action = if let Some(rest) = cmd.strip_prefix(">>") {
        Action::WriteFile {
            path: file(">>", rest)?,
            append: true,
        }
    } else if let Some(rest) = cmd.strip_prefix('>') {
        Action::WriteFile {
            path: file(">", rest)?,
            append: false,
        }
    } else if cmd.starts_with('<') && !cmd.starts_with("<<") && !cmd.starts_with("<(") {
        Action::ReadFile(file("<", &cmd[1..])?)
    } else {
        Action::Command(cmd.to_string())
    };
    Ok(Segment { host, action })
}

/// Parses `--data-host HOST=ADDR`.
pub fn parse_data_host(s: &str) -> Result<(String, String), PlanError> {
    match s.split_once('=') {
        Some((h, a)) if !h.trim().is_empty() && !a.trim().is_empty() => {
            Ok((h.trim().to_string(), a.trim().to_string()))
        }
        _ => Err(PlanError::BadDataHost(s.to_string())),
    }
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
    let n = segments.len();
    let mut nodes = Vec::with_capacity(n + 2);
    if stdin_is_input && !matches!(segments[0].action, Action::ReadFile(_)) {
        nodes.push(Node::Stdin);
    }
    nodes.extend((0..n).map(Node::Segment));
    if !matches!(segments[n - 1].action, Action::WriteFile { .. }) {
        nodes.push(Node::Stdout);
    }
    let host_of = |node: Node| match node {
        Node::Segment(i) => &segments[i].host,
        Node::Stdin | Node::Stdout => &Host::Local,
    };
    let hops = nodes
        .windows(2)
        .map(|w| {
            let (from, to) = (w[0], w[1]);
            let (hf, ht) = (host_of(from), host_of(to));
            // rdpipe's own ends never listen, and the local machine only connects
            // outward: a remote downstream end listens; a remote upstream end
            // listens for a local downstream end; between two local ends the
            // downstream one listens on loopback.
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
        })
        .collect();
    Ok(Pipeline { segments, hops })
}

impl Pipeline {
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

    /// The distinct remote hosts, in first-use order, with their segment indices.
    pub fn remote_hosts(&self) -> Vec<(RemoteHost, Vec<usize>)> {
        let mut out: Vec<(RemoteHost, Vec<usize>)> = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            if let Host::Remote(r) = &s.host {
                match out.iter_mut().find(|(h, _)| h == r) {
                    Some((_, v)) => v.push(i),
                    None => out.push((r.clone(), vec![i])),
                }
            }
        }
        out
    }

    /// The text `rdpipe -n` prints.
    pub fn describe(&self, max_sessions: usize) -> String {
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
            let how = match &seg.host {
                Host::Local => "local, no ssh".to_string(),
                Host::Remote(r) => {
                    format!("ssh {}", r.destination())
                        + &r.port.map(|p| format!(" port {p}")).unwrap_or_default()
                }
            };
            let what = match &seg.action {
                Action::Command(c) => format!("sh -c {c:?}"),
                Action::ReadFile(p) => format!("read file {p:?}"),
                Action::WriteFile { path, append } => format!(
                    "{} file {path:?}",
                    if *append { "append to" } else { "write" }
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
        let remotes = self.remote_hosts();
        if !remotes.is_empty() {
            let _ = writeln!(s, "ssh connections:");
            for (r, segs) in remotes {
                let masters = segs.len().div_ceil(max_sessions);
                let _ = writeln!(
                    s,
                    "  {}: {} segment(s) over {} connection(s)",
                    r.spec,
                    segs.len(),
                    masters
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn addr(r: &RemoteHost) -> String {
        format!("{}.data", r.name)
    }

    #[test]
    fn parses_hosts_and_commands() {
        let s = parse_segment("h1:tr [:lower:] [:upper:]").unwrap();
        assert_eq!(s.action, Action::Command("tr [:lower:] [:upper:]".into()));
        let Host::Remote(r) = s.host else { panic!() };
        assert_eq!((r.name.as_str(), r.user, r.port), ("h1", None, None));

        let s = parse_segment("bob@h2: rev ").unwrap();
        let Host::Remote(r) = s.host else { panic!() };
        assert_eq!(r.user.as_deref(), Some("bob"));
        assert_eq!(r.destination(), "bob@h2");
        assert_eq!(s.action, Action::Command("rev".into()));

        let s = parse_segment("[bob@h3:2222]:cat").unwrap();
        let Host::Remote(r) = s.host else { panic!() };
        assert_eq!((r.name.as_str(), r.port), ("h3", Some(2222)));
        assert_eq!(r.spec, "bob@h3:2222");

        let s = parse_segment("[fe80::1]:cat").unwrap();
        let Host::Remote(r) = s.host else { panic!() };
        assert_eq!((r.name.as_str(), r.port), ("fe80::1", None));

        assert_eq!(parse_segment("-:cat").unwrap().host, Host::Local);
        assert_eq!(parse_segment("localhost:cat").unwrap().host, Host::Local);
        assert!(!parse_segment("me@localhost:cat").unwrap().host.is_local());
    }

    #[test]
    fn parses_operators() {
        assert_eq!(
            parse_segment("h:< /tmp/in").unwrap().action,
            Action::ReadFile("/tmp/in".into())
        );
        assert_eq!(
            parse_segment("h:>'/tmp/a b'").unwrap().action,
            Action::WriteFile {
                path: "/tmp/a b".into(),
                append: false
            }
        );
        assert_eq!(
            parse_segment("h: >> log").unwrap().action,
            Action::WriteFile {
                path: "log".into(),
                append: true
            }
        );
        // Not operators: a heredoc, process substitution, a redirect inside a command.
        assert!(matches!(
            parse_segment("h:<<EOF").unwrap().action,
            Action::Command(_)
        ));
        assert!(matches!(
            parse_segment("h:cat > x").unwrap().action,
            Action::Command(_)
        ));
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(
            parse_segment(":cat"),
            Err(PlanError::EmptyHost(":cat".into()))
        );
        assert_eq!(
            parse_segment("h:"),
            Err(PlanError::EmptyCommand("h:".into()))
        );
        assert_eq!(
            parse_segment("h:   "),
            Err(PlanError::EmptyCommand("h:   ".into()))
        );
        assert_eq!(parse_segment("cat"), Err(PlanError::NoColon("cat".into())));
        assert_eq!(
            parse_segment("h:echo 'oops"),
            Err(PlanError::Unbalanced("h:echo 'oops".into()))
        );
        assert_eq!(
            parse_segment("h:echo \"a\\\""),
            Err(PlanError::Unbalanced("h:echo \"a\\\"".into()))
        );
        assert!(matches!(
            parse_segment("h:>"),
            Err(PlanError::MissingFile { op: ">", .. })
        ));
        assert!(matches!(
            parse_segment("-oProxyCommand=x:cat"),
            Err(PlanError::BadHost { .. })
        ));
        assert!(matches!(
            parse_segment("@h:cat"),
            Err(PlanError::BadHost { .. })
        ));
        assert!(matches!(
            parse_segment("[h:0]:cat"),
            Err(PlanError::BadHost { .. })
        ));
        assert!(matches!(
            parse_segment("[h]cat"),
            Err(PlanError::NoColon(_))
        ));
        assert!(matches!(
            parse_segment("h;x:cat"),
            Err(PlanError::BadHost { .. })
        ));
        assert_eq!(plan(&[], true, &addr), Err(PlanError::Empty));
    }

    #[test]
    fn quotes() {
        assert!(quotes_balanced(r#"echo 'a"b' "c'd" e\'f"#));
        assert!(quotes_balanced(r#"echo "a\"b""#));
        assert!(!quotes_balanced("echo 'a"));
        assert!(!quotes_balanced("echo \"a"));
        assert!(!quotes_balanced("echo a\\"));
    }

    #[test]
    fn hello_pipeline_plan() {
        let p = plan(&args(&["h1:tr a-z A-Z", "h2:rev"]), true, &addr).unwrap();
        assert_eq!(p.hops.len(), 3);
        // rdpipe sends its stdin to h1, which listens.
        assert_eq!(
            p.hops[0],
            Hop {
                from: Node::Stdin,
                to: Node::Segment(0),
                listener: Node::Segment(0),
                address: "h1.data".into()
            }
        );
        // h1 connects to h2's receiver.
        assert_eq!(p.hops[1].listener, Node::Segment(1));
        assert_eq!(p.hops[1].connector(), Node::Segment(0));
        assert_eq!(p.hops[1].address, "h2.data");
        // h2's sender listens, rdpipe connects and writes its stdout.
        assert_eq!(
            p.hops[2],
            Hop {
                from: Node::Segment(1),
                to: Node::Stdout,
                listener: Node::Segment(1),
                address: "h2.data".into()
            }
        );
        assert_eq!(p.links(0), (Link::Listen, Link::Connect));
        assert_eq!(p.links(1), (Link::Listen, Link::Listen));
    }

    #[test]
    fn terminal_stdin_and_file_ends() {
        let p = plan(&args(&["h1:cat", "h2:> out"]), false, &addr).unwrap();
        assert_eq!(p.hops.len(), 1);
        assert_eq!(p.links(0), (Link::None, Link::Connect));
        assert_eq!(p.links(1), (Link::Listen, Link::None));

        // `<` first: rdpipe's stdin is not read even when it is a pipe.
        let p = plan(&args(&["h1:< in", "h2:>> out"]), true, &addr).unwrap();
        assert_eq!(p.hops.len(), 1);
        assert_eq!(p.hops[0].from, Node::Segment(0));

        // `<` and `>` in the middle keep their hops (drained / empty stream).
        let p = plan(
            &args(&["h1:cat", "h2:< f", "h3:> g", "h1:cat"]),
            true,
            &addr,
        )
        .unwrap();
        assert_eq!(p.hops.len(), 5);
        assert_eq!(p.links(1), (Link::Listen, Link::Connect));
        assert_eq!(p.links(2), (Link::Listen, Link::Connect));
    }

    #[test]
    fn local_segments_connect_outward() {
        let p = plan(&args(&["-:cat", "h1:rev", "localhost:cat"]), true, &addr).unwrap();
        // stdin -> local: local agent listens on loopback.
        assert_eq!(p.hops[0].listener, Node::Segment(0));
        assert_eq!(p.hops[0].address, "127.0.0.1");
        // local -> remote: remote listens.
        assert_eq!(p.hops[1].listener, Node::Segment(1));
        assert_eq!(p.hops[1].address, "h1.data");
        // remote -> local: remote sender listens, local connects.
        assert_eq!(p.hops[2].listener, Node::Segment(1));
        assert_eq!(p.hops[2].connector(), Node::Segment(2));
        assert_eq!(p.hops[2].address, "h1.data");
        // local -> stdout: rdpipe never listens, the local agent's sender does.
        assert_eq!(p.hops[3].listener, Node::Segment(2));
        assert_eq!(p.hops[3].address, "127.0.0.1");
        assert_eq!(p.links(2), (Link::Connect, Link::Listen));
    }

    #[test]
    fn repeated_host_uses_loopback() {
        let p = plan(&args(&["h1:cat", "h1:rev", "h2:cat"]), false, &addr).unwrap();
        assert_eq!(p.hops[0].address, "127.0.0.1");
        assert_eq!(p.hops[1].address, "h2.data");
        let r = p.remote_hosts();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].1, vec![0, 1]);
    }

    #[test]
    fn dry_run_text() {
        let p = plan(&args(&["h1:tr a-z A-Z", "h2:rev"]), true, &addr).unwrap();
        let t = p.describe(10);
        assert!(t.contains("[1] h1"), "{t}");
        assert!(
            t.contains(
                "[1] h1 -> [2] h2: [2] h2 listens on an ephemeral port, [1] h1 connects to h2.data"
            ),
            "{t}"
        );
        assert!(t.contains("rdpipe stdin -> [1] h1"), "{t}");
        assert!(t.contains("h1: 1 segment(s) over 1 connection(s)"), "{t}");
        let many: Vec<String> = (0..12).map(|_| "h:cat".to_string()).collect();
        let t = plan(&many, false, &addr).unwrap().describe(10);
        assert!(t.contains("h: 12 segment(s) over 2 connection(s)"), "{t}");
    }

    #[test]
    fn data_host_values() {
        assert_eq!(
            parse_data_host("h1=10.0.0.1").unwrap(),
            ("h1".into(), "10.0.0.1".into())
        );
        assert!(parse_data_host("h1").is_err());
        assert!(parse_data_host("=x").is_err());
    }
}
