//! The caller's hooks into a transfer: the receiver's output, opened only
//! once the peer authenticated (a wrong key never creates or truncates a
//! file), and the progress callback.

use crate::{ChunkReceiver, TransportError};

/// Opens a receiver's output with `open` once the peer authenticated; when that
/// fails, tells the sender why (so it does not wait for a confirmation).
pub(crate) fn open_or_abort<W>(
    rx: &mut dyn ChunkReceiver,
    open: impl FnOnce() -> Result<W, TransportError>,
) -> Result<W, TransportError> {
    open().inspect_err(|e| rx.abort(&format!("receiver cannot open its output: {e}")))
}

/// The progress callback `p`, or one that does nothing.
pub(crate) fn progress_of(p: &mut Option<Box<dyn FnMut(u64) + Send>>) -> &mut dyn FnMut(u64) {
    p.get_or_insert_with(|| Box::new(|_| {})).as_mut()
}
