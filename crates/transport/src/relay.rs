//! A relay host's two transfers (rdpipe's relay-only segment and `--to` sinks
//! that pass the stream on): the incoming one and the outgoing one set up side
//! by side, each in its own thread, then one of two data paths:
//!
//! - **zero-copy** ([`crate::rdma::Forwarder`]) when both came up over RDMA on
//!   the same device (under `--integrity checksum`, without `--rate-limit` or `--compress`): one thread
//!   forwards each chunk from the receive ring with an RDMA WRITE, and writes
//!   only the local copy into the output;
//! - **copying** otherwise (one side TCP, two devices, ...): the incoming
//!   stream goes into the output (local copy and the queue to the sender), the
//!   outgoing one is read from `input`, each in its own thread as for any
//!   transfer. The zero-copy path says at `-v` (debug log) why it was not used.
//!
//! The threads meet once: the incoming one, with an RDMA half, offers it (and
//! the output) to the outgoing one, which takes it or hands it back.

use crate::endpoint::negotiate;
use crate::handshake::Negotiated;
use crate::pump::{recv_stream, send_stream};
use crate::rdma::{Forwarder, RdmaReceiver};
use crate::select::{self, Half};
use crate::session::{open_or_abort, progress_of, protection, Endpoint, Options, Report};
use crate::TransportError;
use rdpipe_wire::Role;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::time::Instant;

/// Set to `1` on a relay host (rdpipe hands it on to every agent) to relay by
/// copy even between two RDMA connections on one device: for comparison.
pub const RELAY_COPY_ENV: &str = "RDPIPE_RELAY_COPY";

/// Whether the copying relay is forced by the environment.
fn copy_forced() -> bool {
    std::env::var(RELAY_COPY_ENV).is_ok_and(|v| v == "1")
}

pub use crate::relay_output::RelayOutput;

/// Makes the relay's output once the upstream sender has authenticated.
pub type RelayOutputFactory =
    Box<dyn FnOnce() -> Result<Box<dyn RelayOutput>, TransportError> + Send>;

/// Where a transfer connects or listens, decided in its own thread.
pub type EndpointSource = Box<dyn FnOnce() -> Result<Endpoint, TransportError> + Send>;

/// Told each transfer's outcome, once.
pub type Done = Box<dyn FnOnce(Result<Report, TransportError>) + Send>;

/// One side of the relay: where, how, and who hears its outcome.
pub struct Side {
    /// Connect or listen.
    pub endpoint: EndpointSource,
    /// The transfer's options.
    pub opts: Options,
    /// Its outcome.
    pub done: Done,
}

/// The incoming side's RDMA half, offered to the outgoing thread.
struct Offer {
    rx: Box<RdmaReceiver>,
    rest: InRest,
}

/// The rest of the incoming side, which goes with its half.
struct InRest {
    n: Negotiated,
    output: RelayOutputFactory,
    opts: Options,
    done: Done,
}

/// The outgoing thread's answer.
enum Answer {
    /// Not forwarding: the incoming thread receives on its own.
    Back(Box<Offer>),
    /// Forwarding: the outgoing thread reports both.
    Taken,
}

/// Runs the relay's two transfers (see the module docs) and returns once both
/// reported: `incoming`'s stream goes to `output` (the local copy, and the
/// queue that `input` reads on the copying path), `outgoing`'s comes from
/// `input` or straight from the receive ring.
pub fn run_relay<R: Read + AsFd + Send + 'static>(
    incoming: Side,
    outgoing: Side,
    input: R,
    output: RelayOutputFactory,
) {
    let (offer_tx, offer_rx) = mpsc::channel::<Box<Offer>>();
    let (answer_tx, answer_rx) = mpsc::channel::<Answer>();
    let out = std::thread::spawn(move || send_side(outgoing, input, offer_rx, answer_tx));
    recv_side(incoming, output, offer_tx, answer_rx);
    let _ = out.join();
}

fn recv_side(
    side: Side,
    output: RelayOutputFactory,
    offer: mpsc::Sender<Box<Offer>>,
    answer: mpsc::Receiver<Answer>,
) {
    let Side {
        endpoint,
        opts,
        done,
    } = side;
    let built = endpoint().and_then(|ep| {
        let (stream, n) = negotiate(ep, &opts, Role::Receiver)?;
        let half = select::recv_half(stream, &n)?;
        Ok((half, n))
    });
    let (half, n) = match built {
        Ok(b) => b,
        Err(e) => return done(Err(e)),
    };
    let (rx, n, output, mut opts, done) = match half {
        Half::Rdma(rx) => {
            let o = Box::new(Offer {
                rx,
                rest: InRest {
                    n,
                    output,
                    opts,
                    done,
                },
            });
            let back = match offer.send(o) {
                Err(mpsc::SendError(o)) => o,
                Ok(()) => {
                    drop(offer);
                    match answer.recv() {
                        Ok(Answer::Back(o)) => o,
                        Ok(Answer::Taken) | Err(_) => return,
                    }
                }
            };
            let Offer { rx, rest } = *back;
            (rx as _, rest.n, rest.output, rest.opts, rest.done)
        }
        Half::Other(rx) => {
            drop(offer);
            (rx, n, output, opts, done)
        }
    };
    let mut rx = rx;
    done(receive(&mut *rx, &n, output, &mut opts));
}

/// The copying path's receive loop into the output.
fn receive(
    rx: &mut dyn crate::ChunkReceiver,
    n: &Negotiated,
    output: RelayOutputFactory,
    opts: &mut Options,
) -> Result<Report, TransportError> {
    let mut output = open_or_abort(rx, output)?;
    let start = Instant::now();
    let progress = progress_of(&mut opts.progress);
    let totals = recv_stream(rx, &mut output, protection(n), progress)?;
    Ok(Report::of(totals, start, rx.describe(), n))
}

fn send_side<R: Read + AsFd>(
    side: Side,
    mut input: R,
    offer: mpsc::Receiver<Box<Offer>>,
    answer: mpsc::Sender<Answer>,
) {
    let Side {
        endpoint,
        mut opts,
        done,
    } = side;
    let built = endpoint().and_then(|ep| {
        let (stream, n) = negotiate(ep, &opts, Role::Sender)?;
        let half = select::send_half(stream, &n, opts.slots as usize)?;
        Ok((half, n))
    });
    // The incoming side's offer, if it has an RDMA half (it waits for our
    // answer; a closed channel: it has none, or failed).
    let o = offer.recv().ok();
    let (half, n) = match built {
        Ok(b) => b,
        Err(e) => {
            if let Some(o) = o {
                let _ = answer.send(Answer::Back(o));
            }
            return done(Err(e));
        }
    };
    let tx = match (half, o) {
        (Half::Rdma(tx), Some(o)) if !copy_forced() => {
            let Offer { rx, rest } = *o;
            let integrity = [rest.n.integrity, n.integrity];
            let paced = n.rate_limit.is_some();
            let compressed = rest.n.compress.is_on() || n.compress.is_on();
            match Forwarder::new(rx, tx, integrity, paced, compressed) {
                Ok(f) => {
                    let _ = answer.send(Answer::Taken);
                    return forward(f, rest, done, &n, &mut opts);
                }
                Err((rx, tx, why)) => {
                    tracing::info!("relaying by copy, not zero-copy: {why}");
                    let _ = answer.send(Answer::Back(Box::new(Offer { rx, rest })));
                    tx as Box<dyn crate::ChunkSender>
                }
            }
        }
        (half, o) => {
            if let Some(o) = o {
                let _ = answer.send(Answer::Back(o));
            }
            tracing::info!(
                "relaying by copy, not zero-copy: a side is not over RDMA, or {RELAY_COPY_ENV}=1"
            );
            half.into_dyn()
        }
    };
    let mut tx = tx;
    let start = Instant::now();
    let progress = progress_of(&mut opts.progress);
    let r = send_stream(&mut input, &mut *tx, protection(&n), n.rate_limit, progress)
        .map(|t| Report::of(t, start, tx.describe(), &n));
    done(r);
}

/// The zero-copy path: opens the output, forwards, reports both transfers.
fn forward(f: Forwarder, o: InRest, done_out: Done, n_out: &Negotiated, opts_out: &mut Options) {
    let InRest {
        n: n_in,
        output,
        opts: mut opts_in,
        done: done_in,
    } = o;
    let mut f = f;
    let mut output = match output() {
        Ok(o) => o,
        Err(e) => {
            // As the copying path: both ends are told; the downstream's stream
            // was never verified.
            f.abort(&format!("the relay cannot open its output: {e}"));
            let unverified = TransportError::Input(io::Error::other(e.to_string()));
            done_in(Err(e));
            return done_out(Err(unverified));
        }
    };
    output.forwarding();
    tracing::info!("relaying zero-copy: RDMA WRITE from the receive ring");
    let [d_in, d_out] = f.describe();
    let start = Instant::now();
    let p_in = progress_of(&mut opts_in.progress);
    let p_out = progress_of(&mut opts_out.progress);
    let [r_in, r_out] = f.run(
        [protection(&n_in), protection(n_out)],
        &mut *output,
        [p_in, p_out],
    );
    done_in(r_in.map(|t| Report::of(t, start, d_in, &n_in)));
    done_out(r_out.map(|t| Report::of(t, start, d_out, n_out)));
}
