//! The control protocol between rdpipe and its agents: one line per message over
//! the agent's SSH channel (stdin: rdpipe → agent, stdout: agent → rdpipe), typed
//! in both directions ([`ToAgent`], [`FromAgent`]), each with `Display` (the line
//! as sent, without its newline) and `FromStr`.
//!
//! rdpipe → agent, on the agent's stdin:
//! - line 1: the keys of the segment's two hops, `IN OUT`, each 64 hex digits or
//!   `-` for a hop the segment does not have (never on argv or in the
//!   environment; see [`KeyLine`]). Every hop has a random key of its own, so no
//!   endpoint can authenticate to another hop's endpoints;
//! - `CONNECT in|out ADDR PORT`: where to connect the incoming / outgoing transfer,
//!   for a side started with `connect`;
//! - `PROBE in|out PORT ADDR...`: before `CONNECT`, when the listening host's
//!   RDMA-capable addresses share no subnet with this host's: probe each (is the
//!   route through an RDMA-capable address, does `PORT` accept a connection?);
//! - `PING`, every [`PING_EVERY`]: rdpipe is alive;
//! - `PROGRESS` (sent right after the key when rdpipe shows a progress line): report
//!   byte counts with `SIZE` and `BYTES`;
//! - `RELINK in KEY`: a fan-out sink whose upstream relay died: listen anew for
//!   the re-link hop, whose key is KEY (64 hex digits), and say `RELINK PORT`;
//! - `RELINK out ADDR PORT KEY`: a relay whose next sink died: connect the
//!   re-link hop to ADDR PORT with KEY and resend from the offset the sink
//!   there asks for (see `rdpipe_transport::chain`);
//! - `UNLINK`: a relay whose next sink died: no re-link is coming (nothing
//!   downstream is left to feed); its relay ends.
//! - `STOP`: `rdpipe forward`'s listening side stops (Ctrl-C);
//! - `ATTACHKEY KEY`: right after the key line, to an agent started with
//!   `--reattach`: the secret a re-attach presents;
//! - `BYE`: rdpipe closes the channel on purpose; the end of file that
//!   follows ends the agent at once;
//! - `ATTACH KEY N`: the first line on a new channel to a detached agent
//!   (see "Re-attach" below).
//!
//! With `--launcher srun` (the agent's `--munge`) the channel is agreed and
//! sealed first ([`seal`]): rdpipe's first line is `MUNGE CRED` ([`CredLine`]),
//! the agent's first is its own `MUNGE CRED` ([`FromAgent::Munge`]), and then
//! every rdpipe → agent line above, the key line included, travels as
//! `SEAL HEX` (Slurm's step I/O is plain TCP; ssh's channel is encrypted).
//!
//! End of file on the agent's stdin after `BYE` ends the agent. Without
//! `BYE` it means rdpipe or its SSH connection is gone: an agent started
//! with `--reattach SECS` keeps its command and hops running and waits up to
//! SECS for a new channel (re-attach), any other ends.
//!
//! Re-attach: a new session runs `rdrecv --agent-attach PATH`, which hands its
//! stdin, stdout and stderr to the agent over the Unix socket PATH (from
//! `DETACHABLE`; a 0700 directory, the peer's uid checked). rdpipe's first
//! line there is `ATTACH KEY N`; the agent answers `ATTACHED M` and sends
//! its lines from the N-th on again, and rdpipe sends its own from the M-th.
//! Both count every line of the run but `PING`, `PONG` and the two attach
//! lines. A channel that carries no `PONG` for [`STALLED_AFTER`] is taken
//! for lost (a connection that stalled without breaking) and re-attached.
//!
//! agent → rdpipe, on the agent's stdout:
//! - `MUNGE CRED`: with `--munge`, before anything else, the agent's answer
//!   to rdpipe's offer ([`seal`]);
//! - `HELLO V`: started, key read (protocol version [`PROTOCOL`]);
//! - `FABRIC [ADDR/LEN ...]`: right after `HELLO`, the host's RDMA-capable
//!   addresses (those of the netdevs of ACTIVE RDMA ports, with their prefix
//!   lengths; none without RDMA libraries or with `--transport tcp`), for
//!   rdpipe's data-address discovery ([`NetAddr`]);
//! - `PORT in|out N`: a side started with `listen` is listening on port N;
//! - `RELINK N`: the re-link hop (after `RELINK in`) listens on port N;
//! - `REACH in|out ADDR=RESULT...`: the answer to `PROBE` ([`Reach`]);
//! - `DONE in|out BYTES CHECKSUM SECS INTEGRITY COMPRESS TRANSPORT`: a transfer
//!   completed, verified (COMPRESS: [`CompressSummary`]'s field, `-` for none);
//! - `EXIT CODE`, `EXIT signal N`, `EXIT killed`: how the command ended (`killed`:
//!   by the agent, after another failure);
//! - `FAIL PART KIND CODE MESSAGE`: something failed. PART is `in`, `out`, `cmd`,
//!   `file` or `agent`; KIND says what the failure means for the verdict
//!   ([`FailKind`]); CODE is the rdsend/rdrecv exit code of a transfer error (1
//!   otherwise); MESSAGE is for people only, never parsed;
//! - `SIZE N`: a `< FILE` segment's file has N bytes (once, after `PROGRESS`);
//! - `COPIED pack ...` / `COPIED unpack ...`: right before `USAGE`, what a
//!   side of an rdcp copy counted ([`CopyCounts`]);
//! - `LANE K LINE`: LINE is about a line merge's lane K (`PORT in`,
//!   `REACH in`, `DONE in`, `LOST in`, `RECONNECTED in`, `FAIL in`, `SPOOL`,
//!   `LINES N`: the whole lines it delivered, `END`);
//! - `SPOOL PEAK SECS`: with `--spool`, the incoming stream's spool's peak
//!   and the time its receiver waited for room;
//! - `USAGE AU AS CU CS`: right before `END`, the CPU the agent and its command
//!   used ([`Usage`]);
//! - `BYTES in|out N`: a running byte count (after `PROGRESS`);
//! - `DETACHABLE PATH`: after `FABRIC`, with `--reattach`: where a new
//!   channel re-attaches;
//! - `ATTACHED N`: the answer to `ATTACH` on a new channel;
//! - `PONG`: with `--reattach`, the answer to each `PING` (not counted);
//! - `END ok` / `END fail`: the last line.
//!
//! The versions of this protocol and what each added are in
//! docs/architecture.md ("Control protocol versions"); an agent and rdpipe
//! work together only at the same [`PROTOCOL`].
//!
//! Also here, because both ends of the channel use them: the sealing of an
//! srun channel ([`seal`], [`munge`]), the hop-key log for tests
//! ([`keylog`]), the agent's command line ([`AgentArgs`]), what an agent
//! binary says it speaks ([`AgentId`]) and the spellings of `--transport`
//! and `--integrity` ([`prefs`]).

use rdpipe_transport::reconnect::Reconnect;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

mod addr;
pub mod agent_args;
pub mod agent_id;
mod conn;
mod copied;
mod hop_report;
pub mod keylog;
mod keys;
pub mod munge;
mod part;
pub mod prefs;
mod reach;
pub mod seal;
pub mod spool;
mod squeeze;
mod usage;
pub use addr::NetAddr;
pub use agent_args::{AgentArgs, Link};
pub use agent_id::{AgentId, VERSION};
pub use conn::{ConnEnd, ConnReport};
pub use copied::CopyCounts;
pub use hop_report::{CmdExit, HopReport};
pub use keys::{decode_hex, encode_hex, KeyLine};
pub use part::{FailKind, Part};
pub use prefs::{integrity_parser, transport_name, transport_parser, IntegrityArg, Transport};
pub use reach::Reach;
pub use seal::CredLine;
pub use spool::SpoolSpec;
pub use squeeze::CompressSummary;
use std::net::IpAddr;
pub use usage::{CpuTimes, Usage};

/// Version of the control protocol (`HELLO V`). An agent of another version is
/// not used.
pub const PROTOCOL: u32 = 13;

/// The most addresses one `PROBE` asks about (and an agent accepts).
pub const MAX_PROBE: usize = 16;

/// How often rdpipe sends `PING` on each agent's control channel.
pub const PING_EVERY: Duration = Duration::from_secs(5);

/// A re-attachable agent's channel that has carried no `PONG` for this long
/// (two `PING`s unanswered, and some) is taken for lost: rdpipe re-attaches
/// through a new ssh connection.
pub const STALLED_AFTER: Duration = Duration::from_secs(12);

/// An agent that hears nothing from rdpipe for this long (no `PING`, no line at
/// all) considers rdpipe or its host gone and ends the segment, with
/// `--reconnect-timeout` added ([`control_silence`]).
pub const CONTROL_SILENCE: Duration = Duration::from_secs(60);

/// How long an agent whose hops reconnect for `reconnect_timeout` seconds
/// waits for a word from rdpipe: a network outage its hops survive must
/// not end it through the control channel (ssh's keepalives likewise:
/// `rdpipe_launch::ssh::alive_count_max`).
pub fn control_silence(reconnect_timeout: u64) -> Duration {
    CONTROL_SILENCE + Duration::from_secs(reconnect_timeout)
}

/// How often an agent sends `BYTES` lines (after `PROGRESS`, while counts change).
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Which transfer of a segment a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The incoming transfer.
    In,
    /// The outgoing transfer.
    Out,
}

impl Direction {
    /// `in` / `out`, as on the control channel.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::In => "in",
            Direction::Out => "out",
        }
    }

    /// 0 for `in`, 1 for `out` (for two-element arrays).
    pub fn index(self) -> usize {
        self as usize
    }
}

impl FromStr for Direction {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "in" => Ok(Direction::In),
            "out" => Ok(Direction::Out),
            _ => Err(ParseError::Field("direction")),
        }
    }
}

/// A control line that is not what the protocol allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// An unknown first word.
    #[error("unknown control line")]
    Unknown,
    /// A missing or malformed field.
    #[error("malformed {0} in a control line")]
    Field(&'static str),
}

/// One rdpipe → agent line (after the key line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToAgent {
    /// `CONNECT in|out ADDR PORT`.
    Connect {
        /// Which transfer.
        dir: Direction,
        /// The address to connect to (host name or IP; no spaces).
        addr: String,
        /// The port.
        port: u16,
    },
    /// `PROBE in|out PORT ADDR...`: probe these addresses of the listening host
    /// of the `dir` transfer, which listens on `port`.
    Probe {
        /// Which transfer.
        dir: Direction,
        /// The listening port.
        port: u16,
        /// The addresses, in order of preference.
        addrs: Vec<IpAddr>,
    },
    /// `PING`.
    Ping,
    /// `PROGRESS`.
    Progress,
    /// `RELINK in KEY`: listen anew for the re-link hop.
    RelinkIn {
        /// The re-link hop's key.
        key: Vec<u8>,
    },
    /// `RELINK out ADDR PORT KEY`: connect the re-link hop there.
    RelinkOut {
        /// The listening sink's address.
        addr: String,
        /// Its port.
        port: u16,
        /// The re-link hop's key.
        key: Vec<u8>,
    },
    /// `UNLINK`: no re-link is coming for the lost relay; to a lane, its
    /// source is gone: give the lane up.
    Unlink,
    /// `STOP`: to `rdpipe forward`'s listening side: stop accepting, cut the
    /// open connections and end both streams cleanly (Ctrl-C).
    Stop,
    /// `BYE`: rdpipe closes this channel on purpose (teardown, Ctrl-C, a
    /// source given up): the end of file that follows ends the segment at
    /// once instead of waiting to be re-attached.
    Bye,
    /// `ATTACHKEY KEY`: the secret a re-attach must present (64 hex
    /// digits), sent once after the key line to a re-attachable agent.
    AttachKey {
        /// The secret.
        secret: Vec<u8>,
    },
    /// `ATTACH KEY N`: the first line on a new channel to a detached agent:
    /// the secret, and how many of the agent's lines rdpipe has (the agent
    /// sends the rest again).
    Attach {
        /// The secret.
        secret: Vec<u8>,
        /// Lines received from the agent so far.
        received: u64,
    },
    /// `LANE K LINE`: `LINE` (`CONNECT in`, `PROBE in`, `UNLINK`) is for lane
    /// K (1-based) of a merge segment's agent.
    Lane {
        /// The lane.
        lane: usize,
        /// The order.
        msg: Box<ToAgent>,
    },
}

impl fmt::Display for ToAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToAgent::Connect { dir, addr, port } => {
                write!(f, "CONNECT {} {addr} {port}", dir.as_str())
            }
            ToAgent::Probe { dir, port, addrs } => {
                write!(f, "PROBE {} {port}", dir.as_str())?;
                addrs.iter().try_for_each(|a| write!(f, " {a}"))
            }
            ToAgent::Ping => f.write_str("PING"),
            ToAgent::Progress => f.write_str("PROGRESS"),
            ToAgent::RelinkIn { key } => write!(f, "RELINK in {}", encode_hex(key)),
            ToAgent::RelinkOut { addr, port, key } => {
                write!(f, "RELINK out {addr} {port} {}", encode_hex(key))
            }
            ToAgent::Unlink => f.write_str("UNLINK"),
            ToAgent::Stop => f.write_str("STOP"),
            ToAgent::Bye => f.write_str("BYE"),
            ToAgent::AttachKey { secret } => write!(f, "ATTACHKEY {}", encode_hex(secret)),
            ToAgent::Attach { secret, received } => {
                write!(f, "ATTACH {} {received}", encode_hex(secret))
            }
            ToAgent::Lane { lane, msg } => write!(f, "LANE {lane} {msg}"),
        }
    }
}

impl FromStr for ToAgent {
    type Err = ParseError;
    fn from_str(l: &str) -> Result<Self, ParseError> {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w[..] {
            ["CONNECT", dir, addr, port] => Ok(ToAgent::Connect {
                dir: dir.parse()?,
                addr: addr.to_string(),
                port: port.parse().map_err(|_| ParseError::Field("port"))?,
            }),
            ["PROBE", dir, port, ref addrs @ ..] => Ok(ToAgent::Probe {
                dir: dir.parse()?,
                port: port.parse().map_err(|_| ParseError::Field("port"))?,
                addrs: reach::parse_addrs(addrs.iter().copied())?,
            }),
            ["PING"] => Ok(ToAgent::Ping),
            ["PROGRESS"] => Ok(ToAgent::Progress),
            ["RELINK", "in", key] => Ok(ToAgent::RelinkIn {
                key: keys::parse_key(key)?,
            }),
            ["RELINK", "out", addr, port, key] => Ok(ToAgent::RelinkOut {
                addr: addr.to_string(),
                port: port.parse().map_err(|_| ParseError::Field("port"))?,
                key: keys::parse_key(key)?,
            }),
            ["UNLINK"] => Ok(ToAgent::Unlink),
            ["STOP"] => Ok(ToAgent::Stop),
            ["BYE"] => Ok(ToAgent::Bye),
            ["ATTACHKEY", key] => Ok(ToAgent::AttachKey {
                secret: keys::parse_key(key)?,
            }),
            ["ATTACH", key, n] => Ok(ToAgent::Attach {
                secret: keys::parse_key(key)?,
                received: n.parse().map_err(|_| ParseError::Field("line count"))?,
            }),
            ["LANE", lane, ..] => {
                let (lane, rest) = lane_prefix(l, lane)?;
                match rest.parse()? {
                    ToAgent::Lane { .. } => Err(ParseError::Field("lane")),
                    msg => Ok(ToAgent::Lane {
                        lane,
                        msg: Box::new(msg),
                    }),
                }
            }
            _ => Err(ParseError::Unknown),
        }
    }
}

/// One agent → rdpipe line.
#[derive(Debug, Clone, PartialEq)]
pub enum FromAgent {
    /// `HELLO V`.
    Hello {
        /// The agent's protocol version.
        version: u32,
    },
    /// `FABRIC [ADDR/LEN ...]`: the host's RDMA-capable addresses.
    Fabric(Vec<NetAddr>),
    /// `PORT in|out N`.
    Port {
        /// The side listening.
        dir: Direction,
        /// The port.
        port: u16,
    },
    /// `REACH in|out ADDR=RESULT...`: the answer to `PROBE`.
    Reach {
        /// Which transfer.
        dir: Direction,
        /// Each probed address and what was found.
        results: Vec<(IpAddr, Reach)>,
    },
    /// `DONE in|out ...`: a transfer completed, verified.
    Done {
        /// Which transfer.
        dir: Direction,
        /// What it carried.
        report: HopReport,
    },
    /// `EXIT ...`.
    Exit(CmdExit),
    /// `FAIL PART KIND CODE MESSAGE`.
    Fail {
        /// What failed.
        part: Part,
        /// What it means.
        kind: FailKind,
        /// The rdsend/rdrecv exit code of a transfer error (1 otherwise).
        code: u8,
        /// For people (control characters replaced by spaces).
        message: String,
    },
    /// `END ok` / `END fail`.
    End {
        /// `END ok`.
        ok: bool,
    },
    /// `BYTES in|out N`.
    Bytes {
        /// Which transfer.
        dir: Direction,
        /// The running count.
        bytes: u64,
    },
    /// `SIZE N`.
    Size(u64),
    /// `RELINK N`: the re-link hop listens on port N.
    RelinkPort(u16),
    /// `LOST in|out N`: the transfer's connection died with N bytes moved;
    /// it is reconnecting (`--reconnect-timeout`).
    Lost {
        /// Which transfer.
        dir: Direction,
        /// Bytes it had moved.
        offset: u64,
    },
    /// `RECONNECTED in|out OFFSET SECS TRANSPORT`: the transfer resumed at
    /// OFFSET on a new connection, SECS after the loss.
    Reconnected {
        /// Which transfer.
        dir: Direction,
        /// Where, after how long, over what.
        reconnect: Reconnect,
    },
    /// `USAGE AU AS CU CS`.
    Usage(Usage),
    /// `COPIED pack|unpack N...`.
    Copied(CopyCounts),
    /// `MUNGE CRED`: the agent's answer on a sealed (srun) channel.
    Munge(CredLine),
    /// `LINES N`: a line merge's lane delivered N whole lines (before its
    /// `END`).
    Lines(u64),
    /// `SPOOL PEAK SECS`: with `--spool`, the incoming stream's spool held at
    /// most PEAK bytes, and the receiver waited SECS for room in it.
    Spool {
        /// The peak backlog in bytes.
        peak: u64,
        /// Seconds the receiver was held back by a full spool.
        held: f64,
    },
    /// `LISTENING ADDR`: `rdpipe forward`'s listening side accepts
    /// connections at ADDR (IP:PORT).
    Listening(std::net::SocketAddr),
    /// `CONN ...`: one forwarded connection is over.
    Conn(ConnReport),
    /// `DETACHABLE PATH`: this agent outlives its control channel for
    /// `--reconnect-timeout`; a new channel re-attaches through the Unix
    /// socket at PATH (right after `FABRIC`).
    Detachable(String),
    /// `ATTACHED N`: the answer to `ATTACH` on a new channel: the agent has
    /// N of rdpipe's lines (rdpipe sends the rest again); the agent's own
    /// lines from rdpipe's count on follow.
    Attached(u64),
    /// `PONG`: a re-attachable agent's answer to `PING` (not counted, never
    /// sent again): rdpipe's sign that the channel still carries lines.
    Pong,
    /// `LANE K LINE`: `LINE` (`PORT in`, `REACH in`, `DONE in`, `BYTES in`,
    /// `LOST in`, `RECONNECTED in`, `FAIL in`, `END`) is about lane K
    /// (1-based) of a merge segment's agent.
    Lane {
        /// The lane.
        lane: usize,
        /// What it says.
        msg: Box<FromAgent>,
    },
}

impl FromAgent {
    /// A `FAIL` line.
    pub fn fail(part: Part, kind: FailKind, code: u8, message: impl fmt::Display) -> FromAgent {
        FromAgent::Fail {
            part,
            kind,
            code,
            message: message.to_string(),
        }
    }
}

/// `s` with every control character (newlines included) replaced by a space, so
/// that a message stays one line and cannot drive a terminal.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

impl fmt::Display for FromAgent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FromAgent::Hello { version } => write!(f, "HELLO {version}"),
            FromAgent::Fabric(v) => {
                f.write_str("FABRIC")?;
                v.iter().try_for_each(|a| write!(f, " {a}"))
            }
            FromAgent::Port { dir, port } => write!(f, "PORT {} {port}", dir.as_str()),
            FromAgent::Reach { dir, results } => {
                write!(f, "REACH {}", dir.as_str())?;
                results.iter().try_for_each(|r| reach::fmt_result(f, r))
            }
            FromAgent::Done { dir, report: r } => write!(
                f,
                "DONE {} {} {:016x} {:.6} {} {} {}",
                dir.as_str(),
                r.bytes,
                r.checksum,
                r.secs,
                r.integrity.as_str(),
                squeeze::token(&r.compress),
                one_line(&r.transport)
            ),
            FromAgent::Exit(e) => write!(f, "EXIT {e}"),
            FromAgent::Fail {
                part,
                kind,
                code,
                message,
            } => write!(
                f,
                "FAIL {} {} {code} {}",
                part.as_str(),
                kind.as_str(),
                one_line(message)
            ),
            FromAgent::End { ok } => f.write_str(if *ok { "END ok" } else { "END fail" }),
            FromAgent::Bytes { dir, bytes } => write!(f, "BYTES {} {bytes}", dir.as_str()),
            FromAgent::Size(n) => write!(f, "SIZE {n}"),
            FromAgent::RelinkPort(p) => write!(f, "RELINK {p}"),
            FromAgent::Lost { dir, offset } => write!(f, "LOST {} {offset}", dir.as_str()),
            FromAgent::Reconnected { dir, reconnect: r } => write!(
                f,
                "RECONNECTED {} {} {:.6} {}",
                dir.as_str(),
                r.offset,
                r.downtime.as_secs_f64(),
                one_line(&r.transport)
            ),
            FromAgent::Usage(u) => write!(f, "USAGE {u}"),
            FromAgent::Copied(c) => write!(f, "COPIED {c}"),
            FromAgent::Munge(c) => write!(f, "{c}"),
            FromAgent::Lane { lane, msg } => write!(f, "LANE {lane} {msg}"),
            FromAgent::Spool { peak, held } => write!(f, "SPOOL {peak} {held:.6}"),
            FromAgent::Lines(n) => write!(f, "LINES {n}"),
            FromAgent::Listening(a) => write!(f, "LISTENING {a}"),
            FromAgent::Conn(c) => write!(f, "CONN {c}"),
            FromAgent::Detachable(p) => write!(f, "DETACHABLE {}", one_line(p)),
            FromAgent::Attached(n) => write!(f, "ATTACHED {n}"),
            FromAgent::Pong => f.write_str("PONG"),
        }
    }
}

/// The lane number of a `LANE K LINE` line `l` (K is `word`, 1-based) and
/// the rest of the line.
fn lane_prefix<'a>(l: &'a str, word: &str) -> Result<(usize, &'a str), ParseError> {
    let lane: usize = num(word, "lane")?;
    if lane == 0 {
        return Err(ParseError::Field("lane"));
    }
    let rest = l
        .strip_prefix("LANE ")
        .and_then(|r| r.strip_prefix(word))
        .and_then(|r| r.strip_prefix(' '))
        .ok_or(ParseError::Field("lane"))?;
    Ok((lane, rest))
}

fn field<'a>(
    w: &mut impl Iterator<Item = &'a str>,
    what: &'static str,
) -> Result<&'a str, ParseError> {
    w.next().ok_or(ParseError::Field(what))
}

fn num<T: FromStr>(s: &str, what: &'static str) -> Result<T, ParseError> {
    s.parse().map_err(|_| ParseError::Field(what))
}

impl FromStr for FromAgent {
    type Err = ParseError;
    fn from_str(l: &str) -> Result<Self, ParseError> {
        let (tag, rest) = l.split_once(' ').unwrap_or((l, ""));
        match tag {
            "HELLO" => Ok(FromAgent::Hello {
                version: num(rest, "version")?,
            }),
            "FABRIC" => rest
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map(FromAgent::Fabric),
            "PORT" => {
                let mut w = rest.split(' ');
                let dir = field(&mut w, "direction")?.parse()?;
                let port = num(field(&mut w, "port")?, "port")?;
                if w.next().is_some() {
                    return Err(ParseError::Field("port"));
                }
                Ok(FromAgent::Port { dir, port })
            }
            "REACH" => {
                let (dir, rest) = rest.split_once(' ').unwrap_or((rest, ""));
                Ok(FromAgent::Reach {
                    dir: dir.parse()?,
                    results: reach::parse_results(rest)?,
                })
            }
            "DONE" => {
                let mut w = rest.splitn(7, ' ');
                let dir = field(&mut w, "direction")?.parse()?;
                let bytes = num(field(&mut w, "bytes")?, "bytes")?;
                let checksum = u64::from_str_radix(field(&mut w, "checksum")?, 16)
                    .map_err(|_| ParseError::Field("checksum"))?;
                let secs: f64 = num(field(&mut w, "seconds")?, "seconds")?;
                if !secs.is_finite() || secs < 0.0 {
                    return Err(ParseError::Field("seconds"));
                }
                let integrity = prefs::integrity_named(field(&mut w, "integrity")?)
                    .ok_or(ParseError::Field("integrity"))?;
                let compress = CompressSummary::parse(field(&mut w, "compression")?)?;
                let transport = field(&mut w, "transport")?.to_string();
                Ok(FromAgent::Done {
                    dir,
                    report: HopReport {
                        bytes,
                        checksum,
                        secs,
                        transport,
                        integrity,
                        compress,
                        reconnects: Vec::new(),
                    },
                })
            }
            "EXIT" => Ok(FromAgent::Exit(rest.parse()?)),
            "FAIL" => {
                let mut w = rest.splitn(4, ' ');
                let part = field(&mut w, "part")?.parse()?;
                let kind = field(&mut w, "failure kind")?.parse()?;
                let code = num(field(&mut w, "code")?, "code")?;
                let message = one_line(w.next().unwrap_or(""));
                Ok(FromAgent::Fail {
                    part,
                    kind,
                    code,
                    message,
                })
            }
            "END" => match rest {
                "ok" => Ok(FromAgent::End { ok: true }),
                "fail" => Ok(FromAgent::End { ok: false }),
                _ => Err(ParseError::Field("end")),
            },
            "BYTES" => {
                let mut w = rest.split(' ');
                let dir = field(&mut w, "direction")?.parse()?;
                let bytes = num(field(&mut w, "bytes")?, "bytes")?;
                if w.next().is_some() {
                    return Err(ParseError::Field("bytes"));
                }
                Ok(FromAgent::Bytes { dir, bytes })
            }
            "SIZE" => Ok(FromAgent::Size(num(rest, "size")?)),
            "RELINK" => Ok(FromAgent::RelinkPort(num(rest, "port")?)),
            "LOST" => {
                let mut w = rest.split(' ');
                let dir = field(&mut w, "direction")?.parse()?;
                let offset = num(field(&mut w, "offset")?, "offset")?;
                Ok(FromAgent::Lost { dir, offset })
            }
            "RECONNECTED" => {
                let mut w = rest.splitn(4, ' ');
                let dir = field(&mut w, "direction")?.parse()?;
                let offset = num(field(&mut w, "offset")?, "offset")?;
                let secs: f64 = num(field(&mut w, "seconds")?, "seconds")?;
                if !secs.is_finite() || !(0.0..1e9).contains(&secs) {
                    return Err(ParseError::Field("seconds"));
                }
                let transport = field(&mut w, "transport")?.to_string();
                Ok(FromAgent::Reconnected {
                    dir,
                    reconnect: Reconnect {
                        offset,
                        downtime: Duration::from_secs_f64(secs),
                        transport,
                    },
                })
            }
            "USAGE" => Ok(FromAgent::Usage(rest.parse()?)),
            "COPIED" => Ok(FromAgent::Copied(rest.parse()?)),
            "MUNGE" => CredLine::new(rest)
                .map(FromAgent::Munge)
                .map_err(|_| ParseError::Field("munge credential")),
            "LINES" => Ok(FromAgent::Lines(num(rest, "lines")?)),
            "LISTENING" => Ok(FromAgent::Listening(num(rest, "address")?)),
            "CONN" => Ok(FromAgent::Conn(rest.parse()?)),
            "DETACHABLE" if rest.starts_with('/') => Ok(FromAgent::Detachable(rest.to_string())),
            "DETACHABLE" => Err(ParseError::Field("socket path")),
            "ATTACHED" => Ok(FromAgent::Attached(num(rest, "line count")?)),
            "PONG" if rest.is_empty() => Ok(FromAgent::Pong),
            "SPOOL" => {
                let mut w = rest.split(' ');
                let peak = num(field(&mut w, "peak")?, "peak")?;
                let held: f64 = num(field(&mut w, "seconds")?, "seconds")?;
                if !held.is_finite() || !(0.0..1e9).contains(&held) || w.next().is_some() {
                    return Err(ParseError::Field("seconds"));
                }
                Ok(FromAgent::Spool { peak, held })
            }
            "LANE" => {
                let (lane, rest) = lane_prefix(l, rest.split(' ').next().unwrap_or(""))?;
                match rest.parse()? {
                    FromAgent::Lane { .. } | FromAgent::Munge(_) | FromAgent::Hello { .. } => {
                        Err(ParseError::Field("lane"))
                    }
                    msg => Ok(FromAgent::Lane {
                        lane,
                        msg: Box::new(msg),
                    }),
                }
            }
            _ => Err(ParseError::Unknown),
        }
    }
}

#[cfg(test)]
mod tests;
