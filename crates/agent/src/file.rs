//! The `< FILE`, `> FILE` and `>> FILE` segments: the agent reads or writes the
//! file itself (no command). `< FILE` in the middle of a pipeline receives the
//! previous output (verified) and discards it; `> FILE` in the middle sends an
//! empty stream onward. Output files are written as rdpipe_transport::output
//! describes: replaced (or appended to) only once the stream was verified.

use super::home::expand_home;
use super::segment::Segment;
use super::transfers::Transfers;
use rdpipe_control::{Direction, Part};
use rdpipe_transport::output::{Mode, OutputFile};
use rdpipe_transport::TransportError;
use std::fs::File;
use std::io::{self, Write};

fn home_path(p: &str) -> String {
    expand_home(p, std::env::var_os("HOME").as_deref())
}

/// Starts a `< FILE` segment.
pub fn start_read(path: &str, seg: &mut Segment, t: &mut Transfers) {
    let path = home_path(path);
    if seg.pending(Direction::In) {
        t.spawn_recv(
            Box::new(|| Ok(Box::new(io::sink()) as Box<dyn Write + Send>)),
            None,
        );
    }
    if seg.pending(Direction::Out) {
        match File::open(&path) {
            Ok(f) => {
                if let Some(m) = f.metadata().ok().filter(|m| m.is_file()) {
                    t.meter.set_size(m.len());
                }
                t.spawn_send(f);
            }
            Err(e) => {
                seg.drop_transfer(Direction::Out);
                seg.setup_failed(Part::File, format!("cannot open {path}: {e}"));
            }
        }
    }
}

/// Starts a `> FILE` (or, with `append`, `>> FILE`) segment; with `direct`,
/// written with O_DIRECT where the filesystem allows it.
pub fn start_write(path: &str, append: bool, direct: bool, seg: &mut Segment, t: &mut Transfers) {
    let path = home_path(path);
    seg.file_target = Some(path.clone());
    let target = path.clone();
    let mode = if append { Mode::Append } else { Mode::Replace };
    // Published (renamed over FILE, or the appended bytes kept) only once the
    // stream was verified; see rdpipe_transport::output.
    let open = move || {
        let mut f = OutputFile::open(std::path::Path::new(&target), mode)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open: {e}")))?;
        if direct {
            if let Err(why) = f.use_direct() {
                tracing::info!("{target}: writing through the page cache, not O_DIRECT: {why}");
            }
        }
        Ok::<_, io::Error>(f)
    };
    if seg.pending(Direction::In) {
        t.spawn_recv(
            Box::new(move || {
                open()
                    .map(|f| Box::new(f) as Box<dyn Write + Send>)
                    .map_err(TransportError::Output)
            }),
            None,
        );
    } else {
        // No incoming stream: an empty one, written as if received.
        match open().and_then(|mut f| f.flush()) {
            Ok(()) => {}
            Err(e) => seg.setup_failed(Part::File, format!("{path}: {e}")),
        }
    }
    // `>` in the middle: an empty stream goes onward.
    send_empty(seg, t);
}

/// A segment that writes and has an outgoing transfer sends an empty stream.
pub fn send_empty(seg: &mut Segment, t: &mut Transfers) {
    if seg.pending(Direction::Out) {
        match File::open("/dev/null") {
            Ok(f) => t.spawn_send(f),
            Err(e) => {
                seg.drop_transfer(Direction::Out);
                seg.setup_failed(Part::Agent, format!("cannot open /dev/null: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_expansion() {
        let home = Some(std::ffi::OsStr::new("/home/x"));
        assert_eq!(expand_home("~/a", home), "/home/x/a");
        assert_eq!(expand_home("/abs", home), "/abs");
        assert_eq!(expand_home("~/a", None), "~/a");
        assert_eq!(expand_home("~a", home), "~a");
    }
}
