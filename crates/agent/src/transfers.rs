//! The segment's two transfers: each runs in a thread of its own
//! (`run_recv` / `run_send` from the transport crate), listening and announcing
//! `PORT` or waiting for rdpipe's `CONNECT`, and reports its outcome as an
//! [`Ev::Done`] event. A relay-only segment's two transfers start together
//! ([`Transfers::spawn_relay`]): zero-copy between two RDMA connections on one
//! device, copying otherwise ([`rdpipe_transport::relay`]).
//!
//! A fan-out sink's hops between sinks ([`ChainPart`]) run as chain hops
//! (`rdpipe_transport::chain`): a relay with a replay window keeps its
//! outgoing stream's last bytes and, when the next sink is lost, waits (at
//! most `--connect-timeout`) for rdpipe's `RELINK out` or `UNLINK`; a sink
//! whose incoming stream is cut short waits as long for `RELINK in`, listens
//! anew (`RELINK PORT`) and resumes where it was.

use super::command::HeldInput;
use super::inbox::{connect_wait, ConnectOrders, RelinkTo};
use super::say::{Meter, Say};
use super::segment::Ev;
use rdpipe_control::Link;
use rdpipe_control::{Direction, FromAgent};
use rdpipe_transport::chain::{run_recv_chain, run_send_chain, Chain, RelinkPoll};
use rdpipe_transport::reconnect::HopState;
use rdpipe_transport::relay::{run_relay, RelayOutputFactory, Side};
use rdpipe_transport::replay::{Input, Recorded};
use rdpipe_transport::{run_recv, run_send, Endpoint, Options, TransportError};
use rdpipe_wire::{Integrity, TransportPref};
use std::io::Write;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Tells rdpipe when a transfer's connection is lost and when it resumed
/// (`LOST`, `RECONNECTED`); a lane's (`Some(K)`) as `LANE K ...`.
fn notice(say: Say, dir: Direction, lane: Option<usize>) -> Box<dyn FnMut(HopState) + Send> {
    Box::new(move |s| {
        let m = match s {
            HopState::Lost { offset } => FromAgent::Lost { dir, offset },
            HopState::Resumed(reconnect) => FromAgent::Reconnected { dir, reconnect },
        };
        say.send(&lane_line(lane, m));
    })
}

use super::say::lane_line;

/// Makes the receiver's output once the sender has authenticated.
pub type OutputFactory = Box<dyn FnOnce() -> Result<Box<dyn Write + Send>, TransportError> + Send>;

type EndpointFactory = Box<dyn FnOnce() -> Result<Endpoint, TransportError> + Send>;

/// Where a lost chain hop re-links (`rdpipe_transport::chain::Relink`).
type RelinkFn = Box<dyn FnMut(u64, Duration) -> RelinkPoll + Send>;

/// A fan-out sink's part in the chain (rdpipe's chain secret on the key line,
/// `--replay-window`, `--chain-in`).
pub struct ChainPart {
    /// The chain's secret: keys the stream MAC of the hops between sinks.
    pub secret: Vec<u8>,
    /// The relay's replay window in bytes (0: its outgoing hop does not
    /// re-link).
    pub window: usize,
    /// The incoming hop comes from another sink: it is a chain hop and
    /// re-links.
    pub chain_in: bool,
}

/// What every transfer of the segment shares.
pub struct Transfers {
    /// Each direction's hop key (empty for a hop the segment does not have).
    pub keys: [Vec<u8>; 2],
    /// Each direction's listening address, when it listens (see `--in-addr`).
    pub addrs: [Option<String>; 2],
    /// `--chunk-size`.
    pub chunk_size: u32,
    /// `--slots`.
    pub slots: u32,
    /// `--transport`.
    pub transport: TransportPref,
    /// `--integrity`.
    pub integrity: Integrity,
    /// `--handshake-timeout`.
    pub handshake_timeout: Duration,
    /// `--rate-limit`.
    pub rate_limit: Option<rdpipe_transport::Rate>,
    /// `--compress`.
    pub compress: rdpipe_wire::Compress,
    /// `--connect-timeout`.
    pub connect_timeout: Duration,
    /// `--reconnect-timeout`.
    pub reconnect_timeout: Duration,
    /// `--reconnect-window`.
    pub reconnect_window: usize,
    /// How each direction takes part (listen or connect).
    pub links: [Link; 2],
    /// The `CONNECT` orders, taken by the side that connects.
    pub orders: ConnectOrders,
    /// Byte counts for `BYTES`.
    pub meter: Arc<Meter>,
    /// `PORT` announcements.
    pub say: Say,
    /// The segment's events.
    pub tx: mpsc::Sender<Ev>,
    /// A fan-out sink's chain hops, when it has any.
    pub chain: Option<ChainPart>,
    /// `--spool`: the incoming stream (each lane's) passes through one.
    pub spool: Option<rdpipe_control::SpoolSpec>,
}

impl Transfers {
    fn options(&self, dir: Direction) -> Options {
        Options {
            key: self.keys[dir.index()].clone(),
            chunk_size: self.chunk_size,
            slots: self.slots,
            transport: self.transport,
            handshake_timeout: self.handshake_timeout,
            integrity: self.integrity,
            rate_limit: self.rate_limit,
            compress: self.compress,
            progress: Some(self.meter.callback(dir)),
            reconnect_timeout: self.reconnect_timeout,
            replay_window: self.reconnect_window,
            notice: Some(notice(self.say.clone(), dir, None)),
        }
    }

    /// Starts lane `lane` (1-based) of a line merge: a receiving transfer
    /// with `key` that listens (at `addr`, announced as `LANE K PORT in N`)
    /// or connects where `LANE K CONNECT in` says, into `output`; its end
    /// is an [`Ev::Lane`].
    pub fn spawn_lane(
        &mut self,
        lane: usize,
        link: Link,
        addr: Option<String>,
        key: Vec<u8>,
        output: Box<dyn Write + Send>,
    ) {
        let mut o = self.options(Direction::In);
        o.key = key;
        // The progress line counts the merged stream, not each lane.
        o.progress = None;
        o.notice = Some(notice(self.say.clone(), Direction::In, Some(lane)));
        let ep: EndpointFactory = match link {
            Link::Listen => {
                let say = self.say.clone();
                let bind = addr.filter(|a| a.parse::<std::net::IpAddr>().is_ok());
                Box::new(move || {
                    Ok(Endpoint::Listen {
                        bind,
                        port: 0,
                        announce: Some(Box::new(move |port| {
                            let m = FromAgent::Port {
                                dir: Direction::In,
                                port,
                            };
                            say.send(&lane_line(Some(lane), m));
                            Ok(())
                        })),
                    })
                })
            }
            Link::Connect | Link::None => {
                let rx = match self.orders.lanes.get_mut(lane - 1) {
                    Some(rx) => {
                        let (dummy_tx, dummy) = mpsc::channel();
                        drop(dummy_tx);
                        std::mem::replace(rx, dummy)
                    }
                    None => mpsc::channel().1,
                };
                let timeout = self.connect_timeout;
                Box::new(move || connect_wait(&rx, timeout))
            }
        };
        let tx = self.tx.clone();
        let (spool, say) = (self.spool.clone(), self.say.clone());
        std::thread::spawn(move || {
            let output: OutputFactory = Box::new(move || {
                super::spool::wrap(spool.as_ref(), output, &say, Some(lane))
                    .map_err(TransportError::Output)
            });
            let r = ep().and_then(|ep| run_recv(ep, o, output));
            let _ = tx.send(Ev::Lane(lane, r));
        });
    }

    /// Where `dir`'s transfer connects or listens, decided in its thread.
    fn endpoint(&mut self, dir: Direction) -> EndpointFactory {
        match self.links[dir.index()] {
            Link::Listen => {
                let say = self.say.clone();
                // Bound to the address the peer uses when it is an IP address
                // (loopback for a local peer); a name may resolve differently
                // here than there, so then all addresses.
                let bind = self.addrs[dir.index()]
                    .clone()
                    .filter(|a| a.parse::<std::net::IpAddr>().is_ok());
                Box::new(move || {
                    Ok(Endpoint::Listen {
                        bind,
                        port: 0,
                        announce: Some(Box::new(move |port| {
                            say.send(&FromAgent::Port { dir, port });
                            Ok(())
                        })),
                    })
                })
            }
            Link::Connect | Link::None => {
                // Each order channel is taken once: one transfer per direction.
                let (dummy_tx, dummy) = mpsc::channel();
                drop(dummy_tx);
                let rx = match dir {
                    Direction::In => std::mem::replace(&mut self.orders.input, dummy),
                    Direction::Out => std::mem::replace(&mut self.orders.output, dummy),
                };
                let timeout = self.connect_timeout;
                Box::new(move || connect_wait(&rx, timeout))
            }
        }
    }

    /// How a sink's incoming chain hop re-links: waits for `RELINK in`, then
    /// listens anew (announced as `RELINK PORT`); `None` when the chain has no
    /// such hop here.
    fn relink_in(&mut self) -> Option<(Vec<u8>, RelinkFn)> {
        let c = self.chain.as_ref().filter(|c| c.chain_in)?;
        let (dummy_tx, dummy) = mpsc::channel();
        drop(dummy_tx);
        let rx = std::mem::replace(&mut self.orders.relink_in, dummy);
        let say = self.say.clone();
        let bind = self.addrs[Direction::In.index()]
            .clone()
            .filter(|a| a.parse::<std::net::IpAddr>().is_ok());
        Some((
            c.secret.clone(),
            Box::new(move |_at: u64, wait: Duration| {
                let key = match rx.recv_timeout(wait) {
                    Ok(key) => key,
                    Err(mpsc::RecvTimeoutError::Timeout) => return RelinkPoll::NotYet,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return RelinkPoll::Refused,
                };
                let say = say.clone();
                let announce: rdpipe_transport::endpoint::Announce = Box::new(move |port| {
                    say.send(&FromAgent::RelinkPort(port));
                    Ok(())
                });
                RelinkPoll::To(
                    Endpoint::Listen {
                        bind: bind.clone(),
                        port: 0,
                        announce: Some(announce),
                    },
                    key,
                )
            }),
        ))
    }

    /// How a relay's outgoing chain hop re-links: waits for `RELINK out` (or
    /// `UNLINK`); `None` when it keeps no replay window.
    fn relink_out(&mut self) -> Option<(Vec<u8>, usize, RelinkFn)> {
        let c = self.chain.as_ref().filter(|c| c.window > 0)?;
        let (dummy_tx, dummy) = mpsc::channel();
        drop(dummy_tx);
        let rx: mpsc::Receiver<Option<RelinkTo>> =
            std::mem::replace(&mut self.orders.relink_out, dummy);
        let timeout = self.connect_timeout;
        Some((
            c.secret.clone(),
            c.window,
            Box::new(
                move |_at: u64, wait: Duration| match rx.recv_timeout(wait) {
                    Ok(Some((host, port, key))) => RelinkPoll::To(
                        Endpoint::Connect {
                            host,
                            port,
                            timeout,
                        },
                        key,
                    ),
                    Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => RelinkPoll::Refused,
                    Err(mpsc::RecvTimeoutError::Timeout) => RelinkPoll::NotYet,
                },
            ),
        ))
    }

    /// Starts the incoming transfer into `output`; `held` (the command's stdin) is
    /// closed once the stream was verified whole. With `--spool`, `output`
    /// is behind a spool.
    pub fn spawn_recv(&mut self, output: OutputFactory, held: Option<HeldInput>) {
        let output: OutputFactory = match self.spool.clone() {
            None => output,
            Some(spec) => {
                let say = self.say.clone();
                Box::new(move || {
                    super::spool::wrap(Some(&spec), output()?, &say, None)
                        .map_err(TransportError::Output)
                })
            }
        };
        let ep = self.endpoint(Direction::In);
        let o = self.options(Direction::In);
        let tx = self.tx.clone();
        let chain = self.relink_in();
        let wait = self.connect_timeout;
        std::thread::spawn(move || {
            let r = ep().and_then(|ep| match chain {
                Some((secret, mut relink)) => {
                    let chain = Chain {
                        secret: &secret,
                        relink: &mut relink,
                        wait,
                    };
                    run_recv_chain(ep, o, output, chain)
                }
                None => run_recv(ep, o, output),
            });
            if r.is_ok() {
                // Verified whole: now the command may see end of file.
                if let Some(h) = held {
                    h.release();
                }
            }
            let _ = tx.send(Ev::Done(Direction::In, r));
        });
    }

    /// Starts a relay's two transfers: the incoming stream into `output`, the
    /// outgoing one from `input` (the copying path) or straight from the
    /// receive ring (zero-copy). `held` (a sink command's stdin) is closed once
    /// the incoming stream was verified whole.
    pub fn spawn_relay<R: Input + Send + 'static>(
        &mut self,
        input: R,
        output: RelayOutputFactory,
        held: Option<HeldInput>,
    ) {
        let done = |dir: Direction, held: Option<HeldInput>| -> rdpipe_transport::relay::Done {
            let tx = self.tx.clone();
            Box::new(move |r| {
                if let (Ok(_), Some(h)) = (&r, held) {
                    // Verified whole: now the command may see end of file.
                    h.release();
                }
                let _ = tx.send(Ev::Done(dir, r));
            })
        };
        let (done_in, done_out) = (done(Direction::In, held), done(Direction::Out, None));
        let incoming = Side {
            endpoint: self.endpoint(Direction::In),
            opts: self.options(Direction::In),
            done: done_in,
        };
        let outgoing = Side {
            endpoint: self.endpoint(Direction::Out),
            opts: self.options(Direction::Out),
            done: done_out,
        };
        std::thread::spawn(move || run_relay(incoming, outgoing, input, output));
    }

    /// Starts a `--to` sink's incoming transfer into `output`, and its relay to
    /// the next sink when it has one (`input`: the relay pipe): together
    /// ([`Transfers::spawn_relay`], zero-copy where it can) when the chain does
    /// not re-link; as two chain hops when it does (`--replay-window` above 0:
    /// the replay window records what the relay pipe carries, which a
    /// zero-copy forward from the receive ring would bypass).
    pub fn spawn_recv_relaying<R: Input + Send + 'static>(
        &mut self,
        input: Option<R>,
        output: RelayOutputFactory,
        held: Option<HeldInput>,
    ) {
        let plain: fn(RelayOutputFactory) -> OutputFactory =
            |output| Box::new(move || output().map(|o| Box::new(o) as Box<dyn Write + Send>));
        match input {
            Some(input) if self.chain.is_none() => self.spawn_relay(input, output, held),
            Some(input) => {
                self.spawn_send(input);
                self.spawn_recv(plain(output), held);
            }
            None => self.spawn_recv(plain(output), held),
        }
    }

    /// Whether this agent's hops reconnect (`--reconnect-timeout` above 0
    /// and a replay window to resend from): a relay then copies through its
    /// queue, each side a reconnecting transfer, instead of forwarding
    /// zero-copy from the receive ring, which keeps nothing to resend.
    pub fn reconnecting(&self) -> bool {
        !self.reconnect_timeout.is_zero() && self.reconnect_window > 0
    }

    /// Starts the outgoing transfer from `input`.
    pub fn spawn_send<R: Input + Send + 'static>(&mut self, mut input: R) {
        let ep = self.endpoint(Direction::Out);
        let o = self.options(Direction::Out);
        let tx = self.tx.clone();
        let chain = self.relink_out();
        let wait = self.connect_timeout;
        std::thread::spawn(move || {
            let r = ep().and_then(|ep| match chain {
                Some((secret, window, mut relink)) => {
                    let chain = Chain {
                        secret: &secret,
                        relink: &mut relink,
                        wait,
                    };
                    run_send_chain(ep, o, &mut Recorded::new(input, window), chain)
                }
                None => run_send(ep, o, &mut input),
            });
            let _ = tx.send(Ev::Done(Direction::Out, r));
        });
    }
}
