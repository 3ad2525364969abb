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
use std::io::{BufRead, BufReader};
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
/// does). With `detach` (`--reattach`), a channel that ends without `BYE`,
/// or goes silent, is waited past instead: [`Detach`]. `PROBE` orders are answered on `say`, probing from `fabric` (this
/// host's RDMA-capable addresses). A merge segment's `lanes` get their own
/// `CONNECT` and `PROBE` orders (`LANE K ...`); `LANE K UNLINK` gives lane K
/// up ([`Ev::LaneDrop`]).
#[allow(clippy::too_many_arguments)]
pub fn listen<R: BufRead + Send + 'static>(
    lanes: usize,
    stdin: R,
    mut opener: Option<Opener>,
    tx: &mpsc::Sender<Ev>,
    meter: &Arc<Meter>,
    say: &Say,
    fabric: Vec<NetAddr>,
    silence: Duration,
    detach: Option<Detach>,
) -> ConnectOrders {
    // Signals end the segment like a closed control channel does.
    {
        let tx = tx.clone();
        crate::guard::on_stop_signals(move |s| {
            let _ = tx.send(Ev::Stop(StopReason::Signal(s)));
            false
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
        let mut channel = Channel::new(Box::new(stdin), detach);
        loop {
            let mut line = match channel.next(silence, &say) {
                Heard::Line(l) => l,
                Heard::End(reason) => {
                    say.give_up();
                    let _ = tx.send(Ev::Stop(reason));
                    return;
                }
            };
            if let Some(o) = opener.as_mut() {
                match o.open(&line) {
                    Ok(l) => line = l,
                    Err(e) => {
                        tracing::warn!("control channel: {e}; ending the segment");
                        let _ = tx.send(Ev::Stop(StopReason::ControlClosed));
                        return;
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
                Ok(ToAgent::Ping) => {
                    if channel.detach.is_some() {
                        say.pong();
                    }
                }
                Ok(ToAgent::Bye) => {
                    tracing::debug!("control: BYE");
                    channel.bye = true;
                }
                Ok(ToAgent::AttachKey { secret }) => {
                    tracing::debug!("control: ATTACHKEY");
                    channel.set_secret(secret);
                }
                Ok(ToAgent::Attach { .. }) => {
                    tracing::debug!("control: ATTACH on an attached channel (ignored)");
                }
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

/// What an agent that may outlive its control channel needs (`--reattach`).
pub struct Detach {
    /// Where a new channel attaches.
    pub listener: crate::attach::Listener,
    /// How long to wait for one.
    pub wait: Duration,
    /// Where the agent's stderr goes to a new channel.
    pub stderr: Arc<crate::stderr_relay::StderrRelay>,
}

/// What the channel gave: a line, or the end of the segment.
enum Heard {
    Line(String),
    End(StopReason),
}

/// What the channel's threads report.
enum Input {
    /// A line of channel number N.
    Line(u32, String),
    /// Channel N ended (end of file, an error, a line cut short).
    Closed(u32),
    /// A new channel, authenticated ([`crate::attach`]).
    Attached(crate::attach::Channel),
}

/// rdpipe's control channel as a sequence of lines across re-attaches: each
/// channel has a reader thread that sends its lines tagged with the
/// channel's number; a new channel replaces the current one whenever it
/// comes, and the lines of a replaced channel are ignored.
struct Channel {
    rx: mpsc::Receiver<Input>,
    tx: mpsc::Sender<Input>,
    /// The current channel's number.
    gen: u32,
    last_heard: Instant,
    /// Lines heard (all channels), less `PING`: what `ATTACHED` says.
    received: u64,
    /// `BYE` was heard: the end of file that follows is meant.
    bye: bool,
    /// `ATTACHKEY`'s secret, which the attach socket's thread checks.
    secret: crate::attach::Secret,
    detach: Option<Detach>,
    /// The helper process of the current channel, when it is a re-attached
    /// one (dropping it ends the helper).
    helper: Option<std::os::unix::net::UnixStream>,
}

impl Channel {
    fn new(first: Box<dyn BufRead + Send>, detach: Option<Detach>) -> Channel {
        let (tx, rx) = mpsc::channel();
        let secret = crate::attach::Secret::default();
        let detach = detach.and_then(|d| {
            let tx = Mutex::new(tx.clone());
            let served = d.listener.serve(secret.clone(), move |ch| {
                let _ = tx
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .send(Input::Attached(ch));
            });
            match served {
                Ok(()) => Some(d),
                Err(e) => {
                    tracing::warn!("cannot serve the re-attach socket: {e}");
                    None
                }
            }
        });
        let c = Channel {
            rx,
            tx,
            gen: 0,
            last_heard: Instant::now(),
            received: 0,
            bye: false,
            secret,
            detach,
            helper: None,
        };
        c.read(first);
        c
    }

    /// `ATTACHKEY`.
    fn set_secret(&self, key: Vec<u8>) {
        *self.secret.lock().unwrap_or_else(|p| p.into_inner()) = Some(key);
    }

    /// Starts the reader thread of the current channel.
    fn read(&self, mut r: Box<dyn BufRead + Send>) {
        let (tx, gen) = (self.tx.clone(), self.gen);
        std::thread::spawn(move || loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(1..) if line.ends_with('\n') => {
                    if tx.send(Input::Line(gen, line)).is_err() {
                        return;
                    }
                }
                _ => {
                    let _ = tx.send(Input::Closed(gen));
                    return;
                }
            }
        });
    }

    /// Takes a new channel over: rdpipe gets the lines it missed, and the
    /// lines of the old channel are ignored from now on. False when the
    /// agent no longer has what rdpipe missed.
    fn take_over(&mut self, ch: crate::attach::Channel, say: &Say) -> bool {
        let Some(d) = &self.detach else {
            return false;
        };
        let has = ch.rdpipe_has;
        if let Err(e) = say.reattach(Box::new(ch.stdout), self.received, has) {
            tracing::warn!("re-attach: {e}");
            return false;
        }
        d.stderr.reattach(ch.stderr);
        self.gen += 1;
        self.last_heard = Instant::now();
        self.helper = Some(ch.helper);
        self.read(Box::new(BufReader::new(ch.stdin)));
        tracing::info!("re-attached (rdpipe had {has} of this agent's lines)");
        true
    }

    /// The next line, across re-attaches; or why the segment ends.
    fn next(&mut self, silence: Duration, say: &Say) -> Heard {
        // While the channel is lost: until when a new one may come.
        let mut lost: Option<(StopReason, Instant)> = None;
        loop {
            let wait = match &lost {
                Some((_, until)) => until.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(1),
            };
            let why = match self.rx.recv_timeout(wait) {
                Ok(Input::Line(g, l)) if g == self.gen => {
                    self.last_heard = Instant::now();
                    if l.trim_end() != "PING" {
                        self.received += 1;
                    }
                    return Heard::Line(l);
                }
                Ok(Input::Closed(g)) if g == self.gen && lost.is_none() => {
                    StopReason::ControlClosed
                }
                Ok(Input::Attached(ch)) => {
                    if !self.take_over(ch, say) {
                        return Heard::End(StopReason::ControlClosed);
                    }
                    lost = None;
                    continue;
                }
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => match lost {
                    Some(_) => {
                        let secs = self.detach.as_ref().map_or(0, |d| d.wait.as_secs());
                        return Heard::End(StopReason::NotReattached(secs));
                    }
                    None if self.last_heard.elapsed() <= silence => continue,
                    None => StopReason::ControlSilent(silence.as_secs()),
                },
                Err(mpsc::RecvTimeoutError::Disconnected) => StopReason::ControlClosed,
            };
            let keyed = self
                .secret
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some();
            let wait = match &self.detach {
                Some(d) if keyed && !self.bye => d.wait,
                _ => return Heard::End(why),
            };
            say.lost();
            self.helper = None;
            tracing::info!(
                "{why}; waiting up to {} s for rdpipe to re-attach",
                wait.as_secs()
            );
            lost = Some((why, Instant::now() + wait));
        }
    }
}
