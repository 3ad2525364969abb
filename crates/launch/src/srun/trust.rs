//! rdpipe's side of an srun agent's sealed control channel
//! ([`rdpipe_control::seal`]): the `MUNGE` offer goes down the step's stdin,
//! the agent's `MUNGE` answer is decoded and checked, and the [`Sealer`] that
//! seals every later line to that agent comes out. Nothing of the run's keys
//! is sent before this succeeds.

use crate::launcher::{AgentHandle, LaunchCause, LaunchError, LauncherKind};
use rdpipe_control::munge::{self, MungeError};
use rdpipe_control::seal::{random32, Answer, Ephemeral, Offer, SealError, Sealer};
use rdpipe_control::{CredLine, FromAgent};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// The longest first line read from an agent.
const MAX_ANSWER: u64 = 8192;

/// Why an agent's channel was not sealed.
pub(super) struct Refusal {
    /// What rdpipe found (None: the agent's own report or exit tells).
    pub cause: Option<LaunchError>,
    /// The line the agent sent instead of its credential (its `FAIL`), for
    /// the event loop to handle as any other.
    pub replay: Option<String>,
}

impl Refusal {
    fn on(node: &str, message: impl std::fmt::Display) -> Refusal {
        Refusal {
            cause: Some(LaunchError::new(
                LauncherKind::Srun,
                Some(node),
                LaunchCause::Seal(message.to_string()),
            )),
            replay: None,
        }
    }

    fn local(e: impl std::fmt::Display) -> Refusal {
        Refusal {
            cause: Some(LaunchError::new(
                LauncherKind::Srun,
                None,
                LaunchCause::Local(e.to_string()),
            )),
            replay: None,
        }
    }
}

/// Runs munge's blocking call off the event loop.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MungeError> + Send + 'static,
) -> Result<T, Refusal> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(Refusal::local(e)),
        Err(e) => Err(Refusal::local(format!("munge task failed: {e}"))),
    }
}

/// Agrees the channel of the agent `h` on `node` (munged at `socket`),
/// waiting up to `limit` for its answer.
pub(super) async fn seal(
    h: &mut AgentHandle,
    node: &str,
    socket: Option<PathBuf>,
    limit: Duration,
) -> Result<Sealer, Refusal> {
    let crypto = |e: SealError| Refusal::local(format!("--launcher srun: {e}"));
    let me = Ephemeral::new().map_err(crypto)?;
    let offer = Offer {
        public: me.public,
        nonce: random32().map_err(crypto)?,
    };
    let uid = rustix::process::getuid().as_raw();
    let here = munge::host_name();
    let cred = {
        let (here, socket, payload) = (here.clone(), socket.clone(), offer.to_string());
        blocking(move || munge::encode(&here, socket.as_deref(), uid, payload.as_bytes())).await?
    };
    let cred = CredLine::new(&cred).map_err(crypto)?;
    // A failure to write shows as the agent's exit.
    if h.stdin
        .write_all(format!("{cred}\n").as_bytes())
        .await
        .is_err()
        || h.stdin.flush().await.is_err()
    {
        return Err(Refusal {
            cause: None,
            replay: None,
        });
    }
    let stdout = std::mem::replace(&mut h.stdout, Box::new(tokio::io::empty()));
    let mut r = BufReader::new(stdout);
    let mut buf = Vec::new();
    let mut first = (&mut r).take(MAX_ANSWER);
    let read = tokio::time::timeout(limit, first.read_until(b'\n', &mut buf)).await;
    h.stdout = Box::new(r);
    let line = match read {
        Err(_) => {
            return Err(Refusal::on(
                node,
                format!(
                    "no munge credential from its agent within {} s (is the job step \
                     starting?)",
                    limit.as_secs()
                ),
            ))
        }
        // End of file: the agent's exit (and srun's stderr) tell why.
        Ok(Err(_) | Ok(0)) => {
            return Err(Refusal {
                cause: None,
                replay: None,
            })
        }
        Ok(Ok(_)) => String::from_utf8_lossy(&buf).trim_end().to_string(),
    };
    let answer_cred = match line.parse::<FromAgent>() {
        Ok(FromAgent::Munge(c)) => c,
        Ok(FromAgent::Fail { .. } | FromAgent::End { .. }) => {
            return Err(Refusal {
                cause: None,
                replay: Some(line),
            })
        }
        _ => {
            let mut r = Refusal::on(
                node,
                format!(
                    "its agent answered '{}' instead of a munge credential: is the agent \
                     there the same version as rdpipe?",
                    rdpipe_control::one_line(&line)
                ),
            );
            r.replay = Some(line);
            return Err(r);
        }
    };
    let got = {
        let (here, socket) = (here.clone(), socket.clone());
        blocking(move || munge::decode(&here, socket.as_deref(), &answer_cred.0)).await?
    };
    if got.uid != uid {
        return Err(Refusal::on(
            node,
            format!(
                "its agent's munge credential was made by uid {}, not by rdpipe's uid {uid}: \
                 refused (someone else is on Slurm's step I/O)",
                got.uid
            ),
        ));
    }
    let answer: Answer = std::str::from_utf8(&got.payload)
        .map_err(|_| SealError::Malformed("answer"))
        .and_then(str::parse)
        .and_then(|a: Answer| a.check(&offer).map(|()| a))
        .map_err(|e| Refusal::on(node, format!("its agent's answer: {e}")))?;
    let key = me
        .agree(&answer.public, &offer, &answer.public)
        .map_err(|e| Refusal::on(node, format!("its agent's answer: {e}")))?;
    Ok(Sealer::new(&key))
}
