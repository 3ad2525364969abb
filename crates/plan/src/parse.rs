//! Parsing one `HOST:CMD` argument (host forms, quoting, the `< FILE` / `> FILE`
//! operators) and `--data-host HOST=ADDR` into the plan's plain values.

use super::{Action, Host, PlanError, RemoteHost, Segment};

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
    } else if arg == "doctor" {
        return Err(PlanError::DoctorNotFirst);
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
        return Ok(Segment {
            host,
            action: Action::Relay,
        });
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
