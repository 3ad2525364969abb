//! A line merge's segment (`rdpipe --from`, without `--each`): instead of
//! one incoming transfer it has one *lane* per source (`--lane`, each a
//! receiving transfer with its own key) and writes every lane's lines, whole
//! and in turns ([`super::merge`]), into its one input: its command's stdin,
//! its `> FILE`, or (the local merge of a run without sink segments) a pipe
//! read by its outgoing transfer.
//!
//! A lane whose stream fails is reported (`LANE K FAIL in ...`, naming the
//! whole lines delivered) and ends; the other lanes go on. rdpipe tells a
//! lane whose source's agent died to give up (`LANE K UNLINK`) instead of
//! waiting out `--reconnect-timeout`. When every lane has ended, the merged
//! input ends cleanly when at least `--lanes-needed` (rdpipe's `--min-ok`,
//! default all) arrived whole, and as a failed input otherwise (a `> FILE`
//! not replaced); rdpipe's verdict names the sources that failed.

use super::command::{self, HeldInput, Shared};
use super::home::expand_home;
use super::merge::{Delivered, LaneWriter, Merged, Notify};
use super::segment::{Ev, Segment};
use super::transfers::Transfers;
use super::AgentArgs;
use rdpipe_control::{Direction, Part};
use rdpipe_transport::output::{Mode, OutputFile};
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Starts a merge segment: its input (command, file, or the relay pipe to its
/// outgoing transfer) and one receiving lane per source.
pub fn start_merge(
    a: &AgentArgs,
    lane_keys: Vec<Vec<u8>>,
    seg: &mut Segment,
    t: &mut Transfers,
    shared: &Arc<Shared>,
) {
    let out: Box<dyn Write + Send> = if let Some(cmd) = &a.cmd {
        let with_output = seg.pending(Direction::Out);
        match command::start(cmd, true, with_output, shared) {
            Ok(started) => {
                seg.command_started(started.child);
                if let Some(o) = started.output {
                    t.spawn_send(o);
                }
                match started.input {
                    Some(held) => {
                        seg.held_input = Some(held.clone());
                        Box::new(Closing(held))
                    }
                    None => return,
                }
            }
            Err(e) => {
                seg.drop_transfer(Direction::Out);
                seg.setup_failed(Part::Cmd, format!("cannot start the shell: {e}"));
                return;
            }
        }
    } else if let Some(path) = a.write.as_ref().or(a.append.as_ref()) {
        let path = expand_home(path, std::env::var_os("HOME").as_deref());
        seg.file_target = Some(path.clone());
        let mode = if a.append.is_some() {
            Mode::Append
        } else {
            Mode::Replace
        };
        match OutputFile::open(Path::new(&path), mode) {
            Ok(f) => Box::new(f),
            Err(e) => {
                seg.setup_failed(Part::File, format!("{path}: cannot open: {e}"));
                return;
            }
        }
    } else {
        match super::relay::relay_pipe() {
            Ok((input, output)) => {
                t.spawn_send(input);
                Box::new(output)
            }
            Err(e) => {
                seg.drop_transfer(Direction::Out);
                seg.setup_failed(Part::Agent, format!("cannot create the merge pipe: {e}"));
                return;
            }
        }
    };
    if lane_keys.len() != a.lanes.len() {
        seg.setup_failed(
            Part::Agent,
            format!(
                "the key line has {} lane key(s) for {} lane(s)",
                lane_keys.len(),
                a.lanes.len()
            ),
        );
        return;
    }
    let tx = Mutex::new(t.tx.clone());
    let notify: Notify = Box::new(move |e| {
        let _ = tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Ev::Merge(e));
    });
    let merged = Merged::new(out, notify);
    let mut lanes = Vec::new();
    for (k, link) in a.lanes.iter().enumerate() {
        let delivered = Arc::new(Delivered::default());
        let tag = a.lane_tags.get(k).map(String::as_str).unwrap_or("");
        let writer = LaneWriter::new(merged.clone(), k + 1, tag, delivered.clone());
        let key = lane_keys[k].clone();
        t.spawn_lane(k + 1, *link, a.lane_addr.clone(), key, Box::new(writer));
        lanes.push(delivered);
    }
    let needed = a.lanes_needed.unwrap_or(lanes.len()).min(lanes.len());
    seg.set_merge(merged, lanes, needed);
}

/// A command's stdin as the merged input: flushing it (every lane ended)
/// closes it, so the command sees end of file.
struct Closing(HeldInput);

impl Write for Closing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        let r = self.0.flush();
        self.0.release();
        r
    }
}
