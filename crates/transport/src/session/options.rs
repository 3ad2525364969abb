//! What a transfer is asked to do, besides where its connection comes from
//! and its input or output: [`Options`], their defaults, and this end's half
//! of the handshake made from them.

use super::report::HopState;
use crate::handshake::LocalParams;
use crate::{select, Rate};
use rdpipe_wire::{Compress, Integrity, Role, TransportPref};
use std::time::Duration;

/// Everything a transfer needs besides the connection and its input or output.
pub struct Options {
    /// The shared key.
    pub key: Vec<u8>,
    /// Bytes per chunk.
    pub chunk_size: u32,
    /// Buffers in flight.
    pub slots: u32,
    /// `--transport`.
    pub transport: TransportPref,
    /// The whole handshake's deadline.
    pub handshake_timeout: Duration,
    /// `--integrity` / `--encrypt`: the protection this end wants (the stronger of
    /// the two ends' wishes is used).
    pub integrity: Integrity,
    /// `--rate-limit`: the most bytes per second the stream may move (the sender
    /// paces to the lower of the two ends' limits).
    pub rate_limit: Option<Rate>,
    /// `--compress`: what this end asks for (compression is on when either
    /// end asks; the sender's wish wins).
    pub compress: Compress,
    /// Called with the running byte count after every chunk.
    pub progress: Option<Box<dyn FnMut(u64) + Send>>,
    /// `--reconnect-timeout`: how long a hop whose connection died tries to
    /// get a new one and resume ([`crate::reconnect`]); zero: it fails at once.
    pub reconnect_timeout: Duration,
    /// `--replay-window`: the bytes a reconnecting sender keeps until the
    /// receiver has them (what can be in flight on the hop).
    pub replay_window: usize,
    /// Told when the hop starts waiting for a reconnect and when the stream
    /// flows again (the progress line says "reconnecting").
    pub notice: Option<Box<dyn FnMut(HopState) + Send>>,
}

/// The default `--reconnect-timeout`.
pub const RECONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The default `--replay-window`: more than can be in flight on a hop (two
/// rings of 2 x 1 MiB, plus socket buffers of up to 4 MiB and 6 MiB at
/// Linux's default limits), rounded up generously.
pub const REPLAY_WINDOW: usize = 32 << 20;

/// This end's half of the handshake, from its options.
pub(crate) fn local_params(opts: &Options, role: Role) -> LocalParams {
    LocalParams {
        role,
        transport: opts.transport,
        caps: select::local_caps(opts.transport),
        chunk_size: opts.chunk_size,
        slots: opts.slots,
        integrity: opts.integrity,
        rate_limit: opts.rate_limit,
        compress: opts.compress,
    }
}
