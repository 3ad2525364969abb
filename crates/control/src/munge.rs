//! munge through its command-line tools: `munge` makes a credential only one
//! uid can decode, `unmunge` decodes one and says who made it. `--launcher
//! srun` trusts it as Slurm itself does, to authenticate the two ends of each
//! agent's control channel ([`crate::seal`]). Each call is bounded
//! ([`MUNGE_TIMEOUT`]); munged's socket is the one Slurm's configuration
//! names (`AuthInfo=socket=PATH`, [`auth_socket`]), munge's default without.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest a `munge` or `unmunge` call may take.
pub const MUNGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most bytes read back from one call (a credential or its metadata).
const MAX_OUTPUT: u64 = 64 * 1024;

/// Why munge could not make or check a credential on a host.
#[derive(Debug, thiserror::Error)]
pub enum MungeError {
    /// The program could not be started.
    #[error(
        "cannot run {program} on {host}: {source}: install munge on {host} \
         (--launcher srun authenticates each agent's control channel with munge)"
    )]
    Missing {
        /// `munge` or `unmunge`.
        program: &'static str,
        /// Where.
        host: String,
        /// Why.
        source: io::Error,
    },
    /// It did not finish in time.
    #[error(
        "{program} on {host} did not answer within {secs} s: is munged running on {host} \
         (socket {socket})?"
    )]
    TimedOut {
        /// `munge` or `unmunge`.
        program: &'static str,
        /// Where.
        host: String,
        /// The bound.
        secs: u64,
        /// The socket used.
        socket: String,
    },
    /// It failed (munged not running, a refused credential).
    #[error(
        "{program} on {host} failed: {message} (socket {socket}; --launcher srun needs \
         munged running on every host of the run, with Slurm's key)"
    )]
    Failed {
        /// `munge` or `unmunge`.
        program: &'static str,
        /// Where.
        host: String,
        /// Its own words.
        message: String,
        /// The socket used.
        socket: String,
    },
    /// unmunge's output did not parse.
    #[error("unmunge on {host}: unreadable output: {what}")]
    Output {
        /// Where.
        host: String,
        /// What was wrong.
        what: &'static str,
    },
}

/// A decoded credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The uid of the process that made it.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// When it was made (seconds since the epoch, the encoding host's clock).
    pub encoded: u64,
    /// What it carries.
    pub payload: Vec<u8>,
}

/// The name of this host for messages: Slurm's node name in a job step
/// (`SLURMD_NODENAME`), else the host name.
pub fn host_name() -> String {
    std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "this host".into())
}

/// munged's socket named by Slurm's configuration: `AuthInfo`'s `socket=`,
/// from `scontrol show config` (`AuthInfo = socket=P,ttl=N`) or slurm.conf
/// (`AuthInfo=socket=P`).
pub fn auth_socket(config: &str) -> Option<PathBuf> {
    config.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("AuthInfo")?;
        let rest = rest.trim_start().strip_prefix('=')?.trim();
        rest.split(',')
            .find_map(|kv| kv.trim().strip_prefix("socket="))
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
    })
}

fn socket_name(socket: Option<&Path>) -> String {
    socket.map_or_else(|| "munge's default".into(), |p| p.display().to_string())
}

/// What a bounded call gave: exit success, stdout, stderr.
struct Ran {
    ok: bool,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `program` with `input` on stdin, killed past [`MUNGE_TIMEOUT`].
fn run(
    program: &'static str,
    host: &str,
    socket: Option<&Path>,
    args: &[String],
    input: &[u8],
) -> Result<Ran, MungeError> {
    let mut c = Command::new(program);
    if let Some(s) = socket {
        c.arg(format!("--socket={}", s.display()));
    }
    let mut child = c
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| MungeError::Missing {
            program,
            host: host.to_string(),
            source,
        })?;
    // The input is one line or a short payload: the pipe takes it whole.
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(input);
    }
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(r) = r {
                let _ = r.take(MAX_OUTPUT).read_to_end(&mut v);
            }
            v
        })
    };
    let out = reader(child.stdout.take().map(|o| Box::new(o) as _));
    let err = reader(child.stderr.take().map(|e| Box::new(e) as _));
    let until = Instant::now() + MUNGE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
            _ => break None,
        }
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(MungeError::TimedOut {
            program,
            host: host.to_string(),
            secs: MUNGE_TIMEOUT.as_secs(),
            socket: socket_name(socket),
        });
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
    Ok(Ran {
        ok: status.success(),
        stdout,
        stderr,
    })
}

/// The last non-empty line of `s`, or `fallback`.
fn last_line(s: &str, fallback: &str) -> String {
    s.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(fallback)
        .to_string()
}

/// A credential carrying `payload` that only `uid` can decode, made on
/// `host` (this one; for messages).
pub fn encode(
    host: &str,
    socket: Option<&Path>,
    uid: u32,
    payload: &[u8],
) -> Result<String, MungeError> {
    let r = run(
        "munge",
        host,
        socket,
        &[format!("--restrict-uid={uid}")],
        payload,
    )?;
    let failed = |message: String| MungeError::Failed {
        program: "munge",
        host: host.to_string(),
        message,
        socket: socket_name(socket),
    };
    if !r.ok {
        return Err(failed(last_line(&r.stderr, "it failed")));
    }
    let cred = String::from_utf8_lossy(&r.stdout).trim().to_string();
    if !cred.starts_with("MUNGE:") || cred.contains(char::is_whitespace) {
        return Err(failed("it printed no credential".into()));
    }
    Ok(cred)
}

/// Decodes `cred` on `host` (this one): munge checks it (its MAC, its time to
/// live, that it was not decoded before, that this uid may decode it).
pub fn decode(host: &str, socket: Option<&Path>, cred: &str) -> Result<Decoded, MungeError> {
    let r = run("unmunge", host, socket, &[], format!("{cred}\n").as_bytes())?;
    if !r.ok {
        // A refused credential: unmunge names why in STATUS (stdout) or on stderr.
        let status = metadata(&r.stdout)
            .ok()
            .and_then(|(m, _)| field(&m, "STATUS").map(|s| s.to_string()));
        let message = status.unwrap_or_else(|| last_line(&r.stderr, "it failed"));
        return Err(MungeError::Failed {
            program: "unmunge",
            host: host.to_string(),
            message,
            socket: socket_name(socket),
        });
    }
    parse_unmunge(&r.stdout).map_err(|what| MungeError::Output {
        host: host.to_string(),
        what,
    })
}

/// unmunge's metadata: (KEY, VALUE) in order.
type Fields = Vec<(String, String)>;

/// unmunge's output: metadata lines (`KEY: VALUE`), an empty line, the payload.
fn metadata(out: &[u8]) -> Result<(Fields, &[u8]), &'static str> {
    let split = out
        .windows(2)
        .position(|w| w == b"\n\n")
        .ok_or("no end of metadata")?;
    let text = std::str::from_utf8(&out[..split]).map_err(|_| "metadata not UTF-8")?;
    let fields = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok((fields, &out[split + 2..]))
}

fn field<'a>(m: &'a [(String, String)], key: &str) -> Option<&'a str> {
    m.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The number in a value: `root (0)` → 0, `1234` → 1234.
fn number(v: &str) -> Option<u64> {
    let n = match v.rsplit_once('(') {
        Some((_, n)) => n.strip_suffix(')')?,
        None => v,
    };
    n.trim().parse().ok()
}

/// A successful unmunge's output: who made the credential, when, and its
/// payload (STATUS must be success, 0).
pub fn parse_unmunge(out: &[u8]) -> Result<Decoded, &'static str> {
    let (m, payload) = metadata(out)?;
    let num = |k: &'static str| field(&m, k).and_then(number).ok_or(k);
    if num("STATUS")? != 0 {
        return Err("STATUS is not success");
    }
    let id = |k: &'static str| num(k).and_then(|n| u32::try_from(n).map_err(|_| k));
    Ok(Decoded {
        uid: id("UID")?,
        gid: id("GID")?,
        encoded: num("ENCODE_TIME")?,
        payload: payload.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OUT: &[u8] = b"STATUS:          Success (0)\n\
ENCODE_HOST:     n1 (10.99.0.11)\n\
ENCODE_TIME:     2026-12-01 18:22:31 +0000 (1796149351)\n\
DECODE_TIME:     2026-12-01 18:22:31 +0000 (1796149351)\n\
TTL:             300\n\
CIPHER:          aes128 (4)\n\
UID:             alice (1000)\n\
GID:             users (100)\n\
UID_RESTRICTION: alice (1000)\n\
LENGTH:          13\n\
\n\
hello payload";

    #[test]
    fn unmunge_output_gives_the_maker_and_the_payload() {
        let d = parse_unmunge(OUT).unwrap();
        assert_eq!((d.uid, d.gid, d.encoded), (1000, 100, 1796149351));
        assert_eq!(d.payload, b"hello payload");
        let numeric = b"STATUS: 0\nENCODE_TIME: 5\nUID: 0\nGID: 0\n\n\npayload with\nlines";
        let d = parse_unmunge(numeric).unwrap();
        assert_eq!(d.payload, b"\npayload with\nlines");
    }

    #[test]
    fn a_refused_or_partial_credential_does_not_parse() {
        let replayed = String::from_utf8_lossy(OUT)
            .replace("Success (0)", "Replayed credential (17)")
            .into_bytes();
        assert!(parse_unmunge(&replayed).is_err());
        for cut in ["UID:", "GID:", "STATUS:", "ENCODE_TIME:"] {
            let text = String::from_utf8_lossy(OUT);
            let without: String = text
                .lines()
                .filter(|l| !l.starts_with(cut))
                .map(|l| format!("{l}\n"))
                .collect();
            assert!(parse_unmunge(without.as_bytes()).is_err(), "{cut}");
        }
        assert!(parse_unmunge(b"STATUS: 0\nUID: 0\nGID: 0\nENCODE_TIME: 1\n").is_err());
        assert!(parse_unmunge(b"STATUS: 0\nUID: 99999999999\nGID: 0\nENCODE_TIME: 1\n\n").is_err());
    }

    #[test]
    fn the_socket_comes_from_authinfo() {
        let show = "AuthAltTypes            = (null)\n\
                    AuthInfo                = socket=/tmp/s/munge.socket,ttl=60\n\
                    AuthType                = auth/munge\n";
        assert_eq!(auth_socket(show), Some("/tmp/s/munge.socket".into()));
        let conf = "AuthType=auth/munge\nAuthInfo=socket=/run/m.sock\n";
        assert_eq!(auth_socket(conf), Some("/run/m.sock".into()));
        assert_eq!(auth_socket("AuthInfo = (null)\n"), None);
        assert_eq!(
            auth_socket("AuthInfoX = socket=/x\nAuthType=auth/munge\n"),
            None
        );
        assert_eq!(auth_socket(""), None);
    }

    #[test]
    fn a_missing_program_names_the_host_and_the_fix() {
        let e = run("munge-not-installed-here", "n7", None, &[], b"").err();
        // (The program name is fixed in the real calls; this checks the message.)
        let e = match e {
            Some(MungeError::Missing { source, .. }) => MungeError::Missing {
                program: "unmunge",
                host: "n7".into(),
                source,
            },
            other => panic!("{other:?}"),
        };
        let m = e.to_string();
        assert!(m.starts_with("cannot run unmunge on n7: "), "{m}");
        assert!(m.contains("install munge on n7"), "{m}");
    }

    proptest! {
        #[test]
        fn any_output_parses_or_fails_without_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_unmunge(&b);
            let _ = auth_socket(&String::from_utf8_lossy(&b));
        }
    }
}
