//! What the agent hears: rdpipe's control lines on stdin (`CONNECT`, `PROBE`,
//! `PING`, `PROGRESS`, `RELINK`, `UNLINK`, `STOP`, end of file), the silence watchdog,
//! and SIGTERM/SIGINT/SIGHUP. Each ends up as an event for the segment
//! ([`super::segment::Ev`]), as the address a waiting transfer connects to, as
//! a re-link order for a fan-out sink's chain hop, or (`PROBE`) as a `REACH`
//! answer.

use super::say::{Meter, Say};
use super::segment::{Ev, StopReason};
use rdpipe_control::seal::Opener;
use rdpipe_control::{Direction, FromAgent, NetAddr, Reach, ToAgent};
use rdpipe_transport::{Endpoint, TransportError};
use std::io::BufRead;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the `connect` sides learn their peer's address.
pub struct ConnectOrders {
    /// `CONNECT in ...`.
    pub input: mpsc::Receiver<(String, u16)>,
    /// `CONNECT out ...`.
    pub output: mpsc::Receiver<(String, u16)>,
    /// `RELINK in KEY`: the re-link hop's key.
    pub relink_in: mpsc::Receiver<Vec<u8>>,
    /// `RELINK out ADDR PORT KEY`, or `UNLINK` (`None`).
    pub relink_out: mpsc::Receiver<Option<RelinkTo>>,
    /// `LANE K CONNECT in ...`, lane K at index K - 1.
    pub lanes: Vec<mpsc::Receiver<(String, u16)>>,
    /// `STOP` (`rdpipe forward`'s listening side).
    pub stop: mpsc::Receiver<()>,
}

/// Where a relay's re-link hop connects: address, port, key.
pub type RelinkTo = (String, u16, Vec<u8>);

/// Waits for the `CONNECT` order on `rx`: the endpoint to connect to.
pub fn connect_wait(
    rx: &mpsc::Receiver<(String, u16)>,
    timeout: Duration,
) -> Result<Endpoint, TransportError> {
    let (host, port) = rx.recv().map_err(|_| TransportError::PeerGone {
        peer: "rdpipe".into(),
        cause: rdpipe_transport::error::GoneCause::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "control channel closed before CONNECT",
        )),
    })?;
    Ok(Endpoint::Connect {
        host,
        port,
        timeout,
    })
}

/// Starts the threads that listen to rdpipe (the rest of `stdin` after the key
/// line, each line opened by `opener` on a sealed channel), watch for its
/// silence and catch signals; all end the segment through `tx` with a
/// [`StopReason`] (a line that does not open ends it as a closed channel
/// does). `PROBE` orders are answered on `say`, probing from `fabric` (this
/// host's RDMA-capable addresses). A merge segment's `lanes` get their own
/// `CONNECT` and `PROBE` orders (`LANE K ...`); `LANE K UNLINK` gives lane K
/// up ([`Ev::LaneDrop`]).
#[allow(clippy::too_many_arguments)]
pub fn listen<R: BufRead + Send + 'static>(
    lanes: usize,
    mut stdin: R,
    mut opener: Option<Opener>,
    tx: &mpsc::Sender<Ev>,
    meter: &Arc<Meter>,
    say: &Say,
    fabric: Vec<NetAddr>,
    silence: Duration,
) -> ConnectOrders {
    // Signals end the segment like a closed control channel does.
    {
        let tx = tx.clone();
        crate::guard::on_stop_signals(move |s| {
            let _ = tx.send(Ev::Stop(StopReason::Signal(s)));
            false
        });
    }
    let last_heard = Arc::new(Mutex::new(Instant::now()));
    {
        // rdpipe pings every PING_EVERY; silence means it (or its host) is gone.
        let tx = tx.clone();
        let last_heard = last_heard.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let t = *last_heard.lock().unwrap_or_else(|p| p.into_inner());
            if t.elapsed() > silence {
                let _ = tx.send(Ev::Stop(StopReason::ControlSilent(silence.as_secs())));
                return;
            }
        });
    }
    let (in_tx, in_rx) = mpsc::channel();
    let (out_tx, out_rx) = mpsc::channel();
    let (relink_in_tx, relink_in_rx) = mpsc::channel();
    let (relink_out_tx, relink_out_rx) = mpsc::channel();
    let (lane_tx, lane_rx): (Vec<_>, Vec<_>) = (0..lanes).map(|_| mpsc::channel()).unzip();
    let (stop_tx, stop_rx) = mpsc::channel();
    let tx = tx.clone();
    let meter = meter.clone();
    let say = say.clone();
    let fabric = Arc::new(fabric);
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => *last_heard.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now(),
            }
            if let Some(o) = opener.as_mut() {
                match o.open(&line) {
                    Ok(l) => line = l,
                    Err(e) => {
                        tracing::warn!("control channel: {e}; ending the segment");
                        break;
                    }
                }
            }
            // A lane takes only its CONNECT, PROBE and UNLINK.
            let (lane, order) = match line.trim_end().parse::<ToAgent>() {
                Ok(ToAgent::Lane { lane, msg })
                    if lane <= lanes
                        && matches!(
                            *msg,
                            ToAgent::Connect { .. } | ToAgent::Probe { .. } | ToAgent::Unlink
                        ) =>
                {
                    (Some(lane), Ok(*msg))
                }
                Ok(ToAgent::Lane { .. }) => {
                    tracing::debug!("control: not for a lane here: {}", line.trim_end());
                    continue;
                }
                other => (None, other),
            };
            match order {
                Ok(ToAgent::Connect { dir, addr, port }) if lane.is_some() => {
                    tracing::debug!("control: {}", line.trim_end());
                    if let (Some(k), Direction::In) = (lane, dir) {
                        let _ = lane_tx[k - 1].send((addr, port));
                    }
                }
                Ok(ToAgent::Unlink) if lane.is_some() => {
                    tracing::debug!("control: {}", line.trim_end());
                    if let Some(k) = lane {
                        let _ = tx.send(Ev::LaneDrop(k));
                    }
                }
                Ok(ToAgent::Ping) => {}
                Ok(ToAgent::Stop) => {
                    tracing::debug!("control: STOP");
                    let _ = stop_tx.send(());
                }
                Ok(ToAgent::Connect { dir, addr, port }) => {
                    tracing::debug!("control: {}", line.trim_end());
                    let to = match dir {
                        Direction::In => &in_tx,
                        Direction::Out => &out_tx,
                    };
                    let _ = to.send((addr, port));
                }
                Ok(ToAgent::Probe { dir, port, addrs }) => {
                    tracing::debug!("control: {}", line.trim_end());
                    // Off this thread: a silent address takes the probe's time limit.
                    let (say, fabric) = (say.clone(), fabric.clone());
                    let asked = addrs.clone();
                    let t = std::thread::Builder::new().name("probe".into()).spawn({
                        let say = say.clone();
                        move || {
                            let results = crate::reach::probe(
                                &addrs,
                                port,
                                &fabric,
                                crate::reach::PROBE_TIMEOUT,
                            );
                            let m = FromAgent::Reach { dir, results };
                            say.send(&crate::say::lane_line(lane, m));
                        }
                    });
                    if t.is_err() {
                        // Cannot probe: answer at once, every address silent.
                        let results = asked.into_iter().map(|a| (a, Reach::Silent)).collect();
                        let m = FromAgent::Reach { dir, results };
                        say.send(&crate::say::lane_line(lane, m));
                    }
                }
                Ok(ToAgent::Progress) => {
                    tracing::debug!("control: {}", line.trim_end());
                    meter.start();
                }
                // (The key is not logged.)
                Ok(ToAgent::RelinkIn { key }) => {
                    tracing::debug!("control: RELINK in");
                    let _ = relink_in_tx.send(key);
                }
                Ok(ToAgent::RelinkOut { addr, port, key }) => {
                    tracing::debug!("control: RELINK out {addr} {port}");
                    let _ = relink_out_tx.send(Some((addr, port, key)));
                }
                Ok(ToAgent::Unlink) => {
                    tracing::debug!("control: UNLINK");
                    let _ = relink_out_tx.send(None);
                }
                // (Unwrapped above: a lane's order is never itself a lane's.)
                Ok(ToAgent::Lane { .. }) => {}
                Err(e) => tracing::debug!("control: {e}: {}", line.trim_end()),
            }
        }
        let _ = tx.send(Ev::Stop(StopReason::ControlClosed));
    });
    ConnectOrders {
        input: in_rx,
        output: out_rx,
        relink_in: relink_in_rx,
        relink_out: relink_out_rx,
        lanes: lane_rx,
        stop: stop_rx,
    }
}
