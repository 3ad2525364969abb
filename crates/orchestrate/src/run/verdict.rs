//! The verdict of a pipeline, as a pure function of what was reported: every
//! failure is a typed [`Cause`] at a [`Node`], ranked by how close it is to the
//! root cause (a command's status, a file, ssh or a missing rdrecv first;
//! transfer errors next; aborts, which echo a failure elsewhere, after that; an
//! agent stopped from outside last). The best-ranked failures are printed, one
//! line each (all of them with `-v`), and the exit status follows `set -o
//! pipefail`: the failing command's (the rightmost), 127 for a missing rdrecv
//! (or one rdpipe could not install),
//! 128+N for signal N, 141 quietly when rdpipe's own stdout was closed, else 1.

use rdpipe_plan::Node;
use std::fmt;

/// rdpipe's exit status for a pipeline that failed without a failing command.
pub const EXIT_FAILED: u8 = 1;
/// Bad arguments.
pub const EXIT_USAGE: u8 = 2;
/// rdrecv missing on a host.
pub const EXIT_NOT_FOUND: u8 = 127;
/// rdpipe's own stdout was closed (as a shell reports SIGPIPE).
pub const EXIT_STDOUT_CLOSED: u8 = 141;

/// Why a pipeline failed, as one report said it. `seg` fields are the segment as
/// messages name it (`h1 [1] 'cat'`); `host` fields the host as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    /// A command failed (`FAIL cmd`), a `< FILE`/`> FILE` failed (`FAIL file`), or
    /// an agent failed on its own (`FAIL agent` of kind error).
    Segment {
        /// The segment.
        seg: String,
        /// What its agent said.
        message: String,
    },
    /// The command stopped reading its input early (`head -c 1000`).
    StoppedReading {
        /// The segment.
        seg: String,
        /// Where its stream came from.
        from: String,
    },
    /// No rdrecv on the host.
    RdrecvMissing {
        /// The host.
        host: String,
    },
    /// The host's rdrecv speaks another agent protocol.
    AgentVersion {
        /// The host.
        host: String,
        /// What it said (its version), when it said anything.
        version: Option<u32>,
    },
    /// rdpipe could not install its agent on the host (and it has no usable
    /// rdrecv).
    Install {
        /// The host.
        host: String,
        /// Why, with what to install.
        error: rdpipe_launch::install::InstallError,
    },
    /// The agent could not be started, or exited before saying HELLO.
    NotStarted {
        /// The segment.
        seg: String,
        /// Why, e.g. `exited with status 1`, or the spawn error.
        how: String,
    },
    /// The agent did not say HELLO in time.
    Silent {
        /// The segment.
        seg: String,
        /// The limit, in seconds.
        secs: u64,
    },
    /// The agent vanished without a report.
    Died {
        /// The segment.
        seg: String,
        /// How it ended.
        how: String,
        /// During teardown (then collateral).
        teardown: bool,
    },
    /// An agent's ssh session was lost and no new one could be made to
    /// re-attach it in time ([`super::reattach`]).
    Unreachable {
        /// The segment.
        seg: String,
        /// Its host.
        host: String,
        /// How the session was lost.
        lost: String,
        /// Why no new one came.
        why: String,
    },
    /// The agent ended (END ok) without reporting every transfer.
    Incomplete {
        /// The segment.
        seg: String,
    },
    /// A launcher could not reach a host or start an agent there (ssh's
    /// master connection, the Slurm allocation, the sealing of a step's
    /// channel).
    Launch(rdpipe_launch::LaunchError),
    /// A transfer failed; `echo` when it is the abort of a stream stopped for a
    /// failure reported elsewhere (exit code 5, or an agent's poisoned output).
    Transfer {
        /// `h2 [2] 'cat': receiving from [1] h1 failed: ...`.
        text: String,
        /// An echo of another failure.
        echo: bool,
    },
    /// rdpipe's own stdout was closed.
    StdoutClosed,
    /// The two ends of a hop report different streams.
    Mismatch {
        /// The sending end.
        from: String,
        /// The receiving end.
        to: String,
        /// (bytes, checksum) as sent.
        sent: Option<(u64, u64)>,
        /// (bytes, checksum) as received.
        received: Option<(u64, u64)>,
    },
    /// A segment never reported success.
    NoSuccess {
        /// The segment.
        seg: String,
    },
    /// The ends that shared a transfer with the segment lost it, and the
    /// segment's agent said nothing about it, not even `END` when its control
    /// channel closed: its host is down or cut off (a host that dies without
    /// a FIN or RST reaching anyone, e.g. a node that loses power).
    Lost {
        /// The segment.
        seg: String,
        /// Its host.
        host: String,
        /// The ends that lost their transfer with it (`[1] n1`, `rdpipe stdout`).
        by: Vec<String>,
    },
    /// An agent was stopped from outside (control channel closed, signal).
    Stopped {
        /// The segment.
        seg: String,
        /// What it said.
        message: String,
    },
    /// Fewer `--to` sinks or `--from` sources than `--min-ok` (default:
    /// all) succeeded.
    TooFew {
        /// Sinks or sources.
        members: Members,
        /// The failed ones' hosts, in order.
        failed: Vec<String>,
        /// How many there are.
        total: usize,
        /// How many had to succeed.
        needed: usize,
    },
    /// rdpipe got SIGINT, SIGTERM or SIGHUP.
    Interrupted(i32),
    /// Anything else rdpipe itself could not do.
    Local(String),
}

impl Cause {
    /// Lower is closer to the root cause.
    pub fn rank(&self) -> u8 {
        match self {
            Cause::Segment { .. }
            | Cause::StoppedReading { .. }
            | Cause::RdrecvMissing { .. }
            | Cause::AgentVersion { .. }
            | Cause::Install { .. }
            | Cause::NotStarted { .. }
            | Cause::Silent { .. }
            | Cause::Died {
                teardown: false, ..
            }
            | Cause::Launch(_)
            | Cause::Lost { .. }
            | Cause::Unreachable { .. }
            | Cause::Interrupted(_)
            | Cause::TooFew { .. }
            | Cause::Local(_) => 0,
            Cause::Incomplete { .. }
            | Cause::Transfer { echo: false, .. }
            | Cause::StdoutClosed
            | Cause::Mismatch { .. } => 1,
            Cause::Transfer { echo: true, .. }
            | Cause::Died { teardown: true, .. }
            | Cause::NoSuccess { .. } => 2,
            Cause::Stopped { .. } => 3,
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "SIGHUP",
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Segment { seg, message } | Cause::Stopped { seg, message } => {
                write!(f, "{seg}: {message}")
            }
            Cause::StoppedReading { seg, from } => write!(
                f,
                "{seg}: the command stopped reading its input; the stream from {from} was cut short"
            ),
            Cause::RdrecvMissing { host } => write!(
                f,
                "{host}: rdrecv not found (install rdma-pipe there or pass --remote-bin)"
            ),
            Cause::AgentVersion { host, version } => {
                write!(f, "{host}: rdrecv there ")?;
                match version {
                    Some(v) => write!(
                        f,
                        "speaks agent protocol {v}, not {}",
                        rdpipe_control::PROTOCOL
                    )?,
                    None => f.write_str("does not understand --agent")?,
                }
                f.write_str(" (install the same rdma-pipe version there)")
            }
            Cause::Install { host, error } => write!(f, "{host}: {error}"),
            Cause::NotStarted { seg, how } => write!(f, "{seg}: the agent did not start: it {how}"),
            Cause::Silent { seg, secs } => {
                write!(f, "{seg}: the agent did not start within {secs} s")
            }
            Cause::Died { seg, how, .. } => {
                write!(f, "{seg}: the agent died without a report ({how})")
            }
            Cause::Unreachable {
                seg,
                host,
                lost,
                why,
            } => write!(
                f,
                "{seg}: its ssh session was lost ({lost}) and no new one came up ({why}): \
                 is {host} down or cut off from the network?"
            ),
            Cause::Lost { seg, host, by } => write!(
                f,
                "{seg}: no word from it since {} lost {} to it: is {host} down or cut off \
                 from the network?",
                by.join(" and "),
                if by.len() > 1 {
                    "their connections"
                } else {
                    "the connection"
                }
            ),
            Cause::Incomplete { seg } => {
                write!(f, "{seg}: the agent ended without completing its transfers")
            }
            Cause::Launch(e) => write!(f, "{e}"),
            Cause::Transfer { text, .. } => f.write_str(text),
            Cause::StdoutClosed => f.write_str("rdpipe's stdout was closed"),
            Cause::Mismatch {
                from,
                to,
                sent,
                received,
            } => write!(
                f,
                "{from} -> {to}: the two ends report different streams ({:?} / {:?})",
                sent.map(|(b, c)| (b, format!("{c:016x}"))),
                received.map(|(b, c)| (b, format!("{c:016x}")))
            ),
            Cause::NoSuccess { seg } => write!(f, "{seg}: no success report"),
            Cause::Interrupted(sig) => {
                write!(f, "interrupted by {}, pipeline stopped", signal_name(*sig))
            }
            Cause::Local(m) => f.write_str(m),
            Cause::TooFew {
                members,
                failed,
                total,
                needed,
            } => write!(
                f,
                "{} of {total} {members} failed ({}); at least {needed} had to succeed (--min-ok N sets how many)",
                failed.len(),
                failed.join(", ")
            ),
        }
    }
}

/// Who a `--min-ok` count is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Members {
    /// A fan-out's `--to` sinks.
    Sinks,
    /// A gather's `--from` sources.
    Sources,
}

impl fmt::Display for Members {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Members::Sinks => "sinks",
            Members::Sources => "sources",
        })
    }
}

/// One failure found: its cause and where it happened (none: rdpipe itself, or the
/// pipeline as a whole).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// What went wrong.
    pub cause: Cause,
    /// Where.
    pub node: Option<Node>,
}

/// The outcome: the lines to print (without the tool prefix) and the exit status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `rdpipe: error: ...` lines.
    pub lines: Vec<String>,
    /// The exit status.
    pub status: u8,
}

/// Decides the verdict from the failures and each segment's command status (as
/// a shell reports it: 128+N for signal N; none when it did not end on its own).
/// With `verbose`, every failure is printed.
pub fn decide(failures: &[Finding], statuses: &[Option<i32>], verbose: bool) -> Verdict {
    if failures.is_empty() {
        return Verdict {
            lines: vec![],
            status: 0,
        };
    }
    let stdout_closed = failures.iter().any(|f| f.cause == Cause::StdoutClosed);
    if stdout_closed && failures.iter().all(|f| f.cause.rank() > 0) {
        // Like a shell pipeline whose reader went away: quiet, SIGPIPE status.
        return Verdict {
            lines: vec![],
            status: EXIT_STDOUT_CLOSED,
        };
    }
    let best = failures.iter().map(|f| f.cause.rank()).min().unwrap_or(1);
    let shown: Vec<&Finding> = if verbose {
        failures.iter().collect()
    } else {
        let mut v: Vec<&Finding> = failures.iter().filter(|f| f.cause.rank() == best).collect();
        // A command that stopped reading and also failed on its own: its exit
        // status is the verdict, whichever of the two reports came first.
        v.retain(|f| {
            !(matches!(f.cause, Cause::StoppedReading { .. })
                && failures.iter().any(|g| {
                    g.cause.rank() == 0
                        && g.node == f.node
                        && !matches!(g.cause, Cause::StoppedReading { .. })
                }))
        });
        if best > 0 {
            v.truncate(1);
        }
        v
    };
    let lines = shown.iter().map(|f| f.cause.to_string()).collect();
    let status = if let Some(sig) = failures.iter().find_map(|f| match f.cause {
        Cause::Interrupted(s) => Some(s),
        _ => None,
    }) {
        128 + sig.clamp(1, 127) as u8
    } else if failures
        .iter()
        .any(|f| matches!(f.cause, Cause::RdrecvMissing { .. } | Cause::Install { .. }))
    {
        EXIT_NOT_FOUND
    } else {
        // pipefail: the rightmost failing command's status.
        (0..statuses.len())
            .rev()
            .filter(|&i| {
                failures
                    .iter()
                    .any(|f| f.cause.rank() == 0 && f.node == Some(Node::Segment(i)))
            })
            .find_map(|i| statuses[i].filter(|&c| c != 0))
            .map(|c| c.clamp(1, 255) as u8)
            .unwrap_or(EXIT_FAILED)
    };
    Verdict { lines, status }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(i: usize, cause: Cause) -> Finding {
        Finding {
            cause,
            node: Some(Node::Segment(i)),
        }
    }

    fn seg_failed(i: usize) -> Finding {
        at(
            i,
            Cause::Segment {
                seg: format!("h{} [{}] 'x'", i + 1, i + 1),
                message: "the command exited with status 3".into(),
            },
        )
    }

    fn echo(i: usize) -> Finding {
        at(
            i,
            Cause::Transfer {
                text: format!("[{}]: receiving failed: aborted", i + 1),
                echo: true,
            },
        )
    }

    #[test]
    fn success_is_silent_and_zero() {
        assert_eq!(decide(&[], &[Some(0)], false).status, 0);
    }

    #[test]
    fn the_root_cause_wins_whatever_the_order() {
        let statuses = [Some(3), None];
        for failures in [vec![echo(1), seg_failed(0)], vec![seg_failed(0), echo(1)]] {
            let v = decide(&failures, &statuses, false);
            assert_eq!(v.lines.len(), 1, "{v:?}");
            assert!(v.lines[0].starts_with("h1 [1] 'x'"), "{v:?}");
            assert_eq!(v.status, 3);
        }
    }

    #[test]
    fn a_lost_host_outranks_its_neighbours_timeouts() {
        let timeout = |i: usize| {
            at(
                i,
                Cause::Transfer {
                    text: format!("h{} [{}] 'x': connection lost", i + 1, i + 1),
                    echo: false,
                },
            )
        };
        let lost = at(
            1,
            Cause::Lost {
                seg: "h2 [2] 'cat'".into(),
                host: "h2".into(),
                by: vec!["[1] h1".into(), "[3] h3".into()],
            },
        );
        let v = decide(&[timeout(0), timeout(2), lost], &[None; 3], false);
        assert_eq!(
            v.lines,
            [
                "h2 [2] 'cat': no word from it since [1] h1 and [3] h3 lost their connections \
              to it: is h2 down or cut off from the network?"
            ]
        );
        assert_eq!(v.status, EXIT_FAILED);
    }

    #[test]
    fn a_host_not_reached_again_outranks_its_neighbours_timeouts() {
        let timeout = at(
            0,
            Cause::Transfer {
                text: "h1 [1] 'x': connection lost".into(),
                echo: false,
            },
        );
        let gone = at(
            1,
            Cause::Unreachable {
                seg: "h2 [2] 'cat'".into(),
                host: "h2".into(),
                lost: "nothing on it for 12 s".into(),
                why: "ssh: connect to host h2 port 22: No route to host".into(),
            },
        );
        let v = decide(&[timeout, gone], &[None; 2], false);
        assert_eq!(
            v.lines,
            [
                "h2 [2] 'cat': its ssh session was lost (nothing on it for 12 s) and no new one \
                 came up (ssh: connect to host h2 port 22: No route to host): is h2 down or cut \
                 off from the network?"
            ]
        );
        assert_eq!(v.status, EXIT_FAILED);
    }

    #[test]
    fn pipefail_takes_the_rightmost_failing_command() {
        let v = decide(
            &[seg_failed(0), seg_failed(2)],
            &[Some(3), None, Some(7)],
            false,
        );
        assert_eq!(v.status, 7);
        assert_eq!(v.lines.len(), 2);
    }

    #[test]
    fn verbose_shows_everything() {
        let v = decide(&[seg_failed(0), echo(1)], &[Some(3), None], true);
        assert_eq!(v.lines.len(), 2);
    }

    #[test]
    fn only_one_line_when_no_root_cause_is_known() {
        let v = decide(&[echo(1), echo(2)], &[None, None, None], false);
        assert_eq!(v.lines.len(), 1);
        assert_eq!(v.status, EXIT_FAILED);
    }

    #[test]
    fn missing_rdrecv_is_127_and_signals_are_128_plus_n() {
        let missing = at(0, Cause::RdrecvMissing { host: "h1".into() });
        assert_eq!(
            decide(std::slice::from_ref(&missing), &[None], false).status,
            127
        );
        let host = "h1".to_string();
        let error = rdpipe_launch::install::InstallError::Probe("no answer within 30 s".into());
        let refused = at(0, Cause::Install { host, error });
        let v = decide(std::slice::from_ref(&refused), &[None], false);
        assert_eq!(v.status, 127);
        assert_eq!(
            v.lines,
            ["h1: cannot check for rdrecv there: no answer within 30 s"]
        );
        let int = Finding {
            cause: Cause::Interrupted(2),
            node: None,
        };
        let v = decide(&[int, missing], &[None], false);
        assert_eq!(v.status, 130);
    }

    #[test]
    fn a_closed_stdout_alone_is_quiet_141() {
        let closed = Finding {
            cause: Cause::StdoutClosed,
            node: Some(Node::Stdout),
        };
        let v = decide(&[closed.clone(), echo(0)], &[None], false);
        assert_eq!(
            v,
            Verdict {
                lines: vec![],
                status: 141
            }
        );
        // With a root cause as well, the root cause speaks.
        let v = decide(&[closed, seg_failed(0)], &[Some(3)], false);
        assert_eq!(v.status, 3);
    }

    #[test]
    fn stopped_reading_gives_way_to_the_same_commands_own_failure() {
        let stopped = at(
            1,
            Cause::StoppedReading {
                seg: "h2 [2] 'head'".into(),
                from: "[1] h1".into(),
            },
        );
        let v = decide(&[stopped.clone(), seg_failed(1)], &[None, Some(3)], false);
        assert_eq!(v.lines.len(), 1);
        assert!(!v.lines[0].contains("stopped reading"), "{v:?}");
        assert_eq!(v.status, 3);
        // Alone, it is the verdict (status 1: the command itself succeeded).
        let v = decide(&[stopped], &[None, Some(0)], false);
        assert!(v.lines[0].contains("stopped reading its input"), "{v:?}");
        assert_eq!(v.status, EXIT_FAILED);
    }

    #[test]
    fn ranks_order_root_causes_before_echoes_before_stops() {
        let stop = Cause::Stopped {
            seg: "s".into(),
            message: "control channel closed".into(),
        };
        let died_late = Cause::Died {
            seg: "s".into(),
            how: "x".into(),
            teardown: true,
        };
        let died_early = Cause::Died {
            seg: "s".into(),
            how: "x".into(),
            teardown: false,
        };
        assert!(died_early.rank() < Cause::StdoutClosed.rank());
        assert!(Cause::StdoutClosed.rank() < died_late.rank());
        assert!(died_late.rank() < stop.rank());
    }
}
