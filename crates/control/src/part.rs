//! The words of a `FAIL` line: which part of a segment failed ([`Part`]) and
//! what the failure means for the verdict ([`FailKind`]).

use super::ParseError;
use std::str::FromStr;

/// Which part of a segment failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The incoming transfer.
    In,
    /// The outgoing transfer.
    Out,
    /// The command.
    Cmd,
    /// The `< FILE` / `> FILE` action.
    File,
    /// The agent itself.
    Agent,
}

impl Part {
    /// The word on the control channel.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::In => "in",
            Part::Out => "out",
            Part::Cmd => "cmd",
            Part::File => "file",
            Part::Agent => "agent",
        }
    }
}

impl FromStr for Part {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "in" => Part::In,
            "out" => Part::Out,
            "cmd" => Part::Cmd,
            "file" => Part::File,
            "agent" => Part::Agent,
            _ => return Err(ParseError::Field("part")),
        })
    }
}

/// What a failure means for the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// A failure of its own (a command's status, a file, a transfer error).
    Error,
    /// The command stopped reading its input before the stream ended (`head -c
    /// 1000`): its own choice, like SIGPIPE for its producer in a shell pipeline.
    StoppedReading,
    /// The outgoing stream was aborted because of a failure reported elsewhere.
    Echo,
    /// The agent was stopped from outside: its control channel closed or went
    /// silent, or it got SIGTERM/SIGINT/SIGHUP.
    Stopped,
}

impl FailKind {
    /// The word on the control channel.
    pub fn as_str(self) -> &'static str {
        match self {
            FailKind::Error => "error",
            FailKind::StoppedReading => "stopped-reading",
            FailKind::Echo => "echo",
            FailKind::Stopped => "stopped",
        }
    }
}

impl FromStr for FailKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "error" => FailKind::Error,
            "stopped-reading" => FailKind::StoppedReading,
            "echo" => FailKind::Echo,
            "stopped" => FailKind::Stopped,
            _ => return Err(ParseError::Field("failure kind")),
        })
    }
}
