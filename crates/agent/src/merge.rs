//! A line merge's shared input ([`Merged`]) and each lane's writer into it
//! ([`LaneWriter`]): how the lanes of a merge segment ([`super::gather`])
//! write their sources' lines into the segment's one input.
//!
//! What the merged stream promises:
//!
//! - **Whole lines.** A lane writes only complete lines (up to `\n`), each
//!   batch under the output's turn ([`Turns`]), so no line of one source is
//!   ever cut by another's. A source's last line without `\n` is delivered
//!   with one added, when its stream ends verified.
//! - **Each source's order**, and no waiting: the lines in a received chunk go
//!   out as soon as it arrives, never held for a buffer to fill.
//! - **Fairness: round-robin by batch.** The turn is a ticket lock (first
//!   come, first served): a lane writes the complete lines of one received
//!   chunk (at most one chunk, `--chunk-size`) and queues again behind every
//!   lane already waiting, so a chatty source cannot starve a quiet one.
//! - **Long lines.** A partial line is buffered up to [`LONG_LINE`]; a line
//!   longer than that takes the turn and keeps it until its `\n` (lines of
//!   any length arrive whole and unmixed; the other lanes wait meanwhile, as
//!   they must). Memory per lane: a partial line of up to [`LONG_LINE`]
//!   plus one received chunk.
//! - **Back-pressure.** A lane writes while holding its received chunk: a
//!   sink that stalls stalls the lanes' receivers, and through the transport
//!   their sources; nothing is dropped.
//!
//! A lane whose stream fails drops its partial line (a long line it was
//! streaming through is ended where it was cut: [`Merged::end_long`]); a
//! lane given up writes no more ([`Delivered::given_up`]). When every lane
//! has ended the segment ends the input: [`Merged::finish`] when enough
//! lanes arrived whole, [`Merged::abandon`] otherwise (the segment's state
//! machine, `segment.rs`, decides).

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// The longest partial line a lane buffers before it takes the turn and
/// streams the line through.
pub const LONG_LINE: usize = 1 << 20;

/// The merged input's turn: a ticket lock, so lanes write in the order they
/// asked (round-robin when all are busy).
#[derive(Default)]
pub struct Turns {
    tickets: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl Turns {
    /// Waits for this caller's turn (given back with [`Turns::give`]).
    fn take(&self) {
        let mut g = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        let mine = g.0;
        g.0 += 1;
        while g.1 != mine {
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Passes the turn on.
    fn give(&self) {
        let mut g = self.tickets.lock().unwrap_or_else(|p| p.into_inner());
        g.1 += 1;
        self.cv.notify_all();
    }
}

/// Holding the merged input's turn; dropping it passes the turn on.
struct Turn(Arc<Merged>);

impl Turn {
    fn take(m: &Arc<Merged>) -> Turn {
        m.turns.take();
        Turn(m.clone())
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.turns.give();
    }
}

/// The segment's input every lane writes into, shared.
pub struct Merged {
    turns: Turns,
    out: Mutex<Option<Box<dyn Write + Send>>>,
    /// The lane (1-based) holding the turn through a long line, which only
    /// it, or whoever gives that lane up, passes on ([`Merged::end_long`]).
    long: Mutex<Option<usize>>,
    /// Writing failed (the command stopped reading, the file's disk is
    /// full): every lane stops; reported once.
    broken: AtomicBool,
    notify: Notify,
}

/// What the merged input tells its segment.
#[derive(Debug)]
pub enum MergeEvent {
    /// Writing into the input failed (once): the error's kind and text.
    Broken(io::ErrorKind, String),
    /// The input ended ([`Merged::finish`]); `Err`: how its flush failed.
    Ended(Result<(), String>),
}

/// Where [`MergeEvent`]s go.
pub type Notify = Box<dyn Fn(MergeEvent) + Send + Sync>;

impl Merged {
    /// A merged input writing into `out`; its failure and its end go to
    /// `notify`.
    pub fn new(out: Box<dyn Write + Send>, notify: Notify) -> Arc<Merged> {
        Arc::new(Merged {
            turns: Turns::default(),
            out: Mutex::new(Some(out)),
            long: Mutex::new(None),
            broken: AtomicBool::new(false),
            notify,
        })
    }

    fn send(&self, ev: MergeEvent) {
        (self.notify)(ev);
    }

    /// Writes `parts` in one go (the caller holds the turn).
    fn write_parts(&self, parts: &[&[u8]]) -> io::Result<()> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut g = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let Some(out) = g.as_mut() else {
            return Err(io::ErrorKind::BrokenPipe.into());
        };
        let r = parts.iter().try_for_each(|p| out.write_all(p));
        if let Err(e) = &r {
            if !self.broken.swap(true, Ordering::SeqCst) {
                self.send(MergeEvent::Broken(e.kind(), e.to_string()));
            }
        }
        r
    }

    /// Lane `lane` takes the turn for a long line, and keeps it.
    fn start_long(self: &Arc<Self>, lane: usize) {
        self.turns.take();
        *self.long.lock().unwrap_or_else(|p| p.into_inner()) = Some(lane);
    }

    /// Lane `lane`'s long line ended (or, `cut`, was cut short: it gets a
    /// `\n` so that the next line starts on its own): the turn passes on.
    /// Nothing when the lane does not hold it (any more).
    pub fn end_long(&self, lane: usize, cut: bool) {
        let mut long = self.long.lock().unwrap_or_else(|p| p.into_inner());
        if *long != Some(lane) {
            return;
        }
        if cut && !self.is_broken() {
            let _ = self.write_parts(&[b"\n"]);
        }
        *long = None;
        self.turns.give();
    }

    /// Every lane has ended: ends the merged input off the caller's thread
    /// (flushing publishes a `> FILE`, closes a command's stdin or ends the
    /// relay pipe verified), then reports [`MergeEvent::Ended`].
    pub fn finish(self: &Arc<Self>) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("merge-end".into())
            .spawn(move || {
                let out = me.out.lock().unwrap_or_else(|p| p.into_inner()).take();
                let r = match out {
                    Some(mut o) if !me.is_broken() => o.flush().map_err(|e| e.to_string()),
                    _ => Ok(()),
                };
                me.send(MergeEvent::Ended(r));
            });
        if let Err(e) = spawned {
            self.send(MergeEvent::Ended(Err(format!(
                "cannot end the merged input: {e}"
            ))));
        }
    }

    /// Too few lanes arrived whole: the merged input is dropped unended (a
    /// `> FILE` is not replaced, appended lines are undone, a relay pipe
    /// ends unverified).
    pub fn abandon(&self) {
        drop(self.out.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Whether writing into the input failed.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }
}

/// What a lane has delivered: whole lines and their bytes (with tags).
#[derive(Default)]
pub struct Delivered {
    /// Whole lines written into the merged input.
    pub lines: AtomicU64,
    /// Their bytes, as written.
    pub bytes: AtomicU64,
    /// rdpipe gave the lane up (its source is gone): it writes no more.
    pub given_up: AtomicBool,
}

/// One lane's receiver output: whole lines into the merged input.
pub struct LaneWriter {
    merged: Arc<Merged>,
    /// The lane (1-based).
    lane: usize,
    /// `--tag`'s prefix (empty without).
    tag: Vec<u8>,
    /// The partial line so far (without its tag).
    partial: Vec<u8>,
    /// A long line is being streamed through: this lane holds the turn
    /// until its `\n`.
    holding: bool,
    /// The tagged batch being built (reused).
    batch: Vec<u8>,
    delivered: Arc<Delivered>,
}

impl LaneWriter {
    /// Lane `lane` writing into `merged`, each line prefixed with `tag`.
    pub fn new(
        merged: Arc<Merged>,
        lane: usize,
        tag: &str,
        delivered: Arc<Delivered>,
    ) -> LaneWriter {
        LaneWriter {
            merged,
            lane,
            tag: tag.as_bytes().to_vec(),
            partial: Vec::new(),
            holding: false,
            batch: Vec::new(),
            delivered,
        }
    }

    fn count(&self, lines: u64, bytes: usize) {
        self.delivered.lines.fetch_add(lines, Ordering::Relaxed);
        self.delivered
            .bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Writes `head` (the partial line so far) and the complete lines in
    /// `lines` (ending in `\n`), tagged, in one turn: one write for the
    /// batch with tags, two without.
    fn write_lines(&mut self, head: &[u8], lines: &[u8]) -> io::Result<()> {
        let n = lines.iter().filter(|&&b| b == b'\n').count() as u64;
        if self.tag.is_empty() {
            let _turn = Turn::take(&self.merged);
            self.merged.write_parts(&[head, lines])?;
            self.count(n, head.len() + lines.len());
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        let mut first = Some(head);
        for line in lines.split_inclusive(|&b| b == b'\n') {
            batch.extend_from_slice(&self.tag);
            if let Some(h) = first.take() {
                batch.extend_from_slice(h);
            }
            batch.extend_from_slice(line);
        }
        let r = {
            let _turn = Turn::take(&self.merged);
            self.merged.write_parts(&[&batch])
        };
        if r.is_ok() {
            self.count(n, batch.len());
        }
        self.batch = batch;
        r
    }

    fn check(&self) -> io::Result<()> {
        if self.delivered.given_up.load(Ordering::SeqCst) {
            return Err(io::Error::other(
                "the lane was given up: its source is gone",
            ));
        }
        Ok(())
    }
}

impl Write for LaneWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check()?;
        let mut rest = buf;
        // A long line in progress: stream up to its end, then let go.
        if self.holding {
            match rest.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    self.merged.write_parts(&[&rest[..=end]])?;
                    self.count(1, end + 1);
                    self.holding = false;
                    self.merged.end_long(self.lane, false);
                    rest = &rest[end + 1..];
                }
                None => {
                    self.merged.write_parts(&[rest])?;
                    self.count(0, rest.len());
                    return Ok(buf.len());
                }
            }
        }
        if let Some(last) = rest.iter().rposition(|&b| b == b'\n') {
            let head = std::mem::take(&mut self.partial);
            self.write_lines(&head, &rest[..=last])?;
            rest = &rest[last + 1..];
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > LONG_LINE {
            self.merged.start_long(self.lane);
            self.holding = true;
            let partial = std::mem::take(&mut self.partial);
            self.merged.write_parts(&[&self.tag, &partial])?;
            self.count(0, self.tag.len() + partial.len());
        }
        Ok(buf.len())
    }

    /// The lane's stream ended verified: its last line, without `\n`, is
    /// delivered with one.
    fn flush(&mut self) -> io::Result<()> {
        self.check()?;
        if self.holding {
            self.holding = false;
            self.count(1, 1);
            self.merged.end_long(self.lane, true);
        } else if !self.partial.is_empty() {
            let mut line = std::mem::take(&mut self.partial);
            line.push(b'\n');
            self.write_lines(&[], &line)?;
        }
        Ok(())
    }
}

impl Drop for LaneWriter {
    fn drop(&mut self) {
        if self.holding {
            // Cut inside a long line: ended where it was cut, so that the
            // next line starts on a line of its own (rdpipe's verdict says
            // where this source stopped).
            self.merged.end_long(self.lane, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn notify(tx: std::sync::mpsc::Sender<MergeEvent>) -> Notify {
        let tx = Mutex::new(tx);
        Box::new(move |e| {
            let _ = tx.lock().unwrap().send(e);
        })
    }

    fn merged() -> (Arc<Merged>, Buf, std::sync::mpsc::Receiver<MergeEvent>) {
        let buf = Buf::default();
        let (tx, rx) = std::sync::mpsc::channel();
        (Merged::new(Box::new(buf.clone()), notify(tx)), buf, rx)
    }

    fn lane(m: &Arc<Merged>, tag: &str) -> (LaneWriter, Arc<Delivered>) {
        static LANES: AtomicU64 = AtomicU64::new(1);
        let d = Arc::new(Delivered::default());
        let k = LANES.fetch_add(1, Ordering::Relaxed) as usize;
        (LaneWriter::new(m.clone(), k, tag, d.clone()), d)
    }

    #[test]
    fn lines_go_out_whole_tagged_and_the_last_gets_a_newline() {
        let (m, buf, _rx) = merged();
        let (mut a, da) = lane(&m, "a: ");
        let (mut b, _) = lane(&m, "b: ");
        a.write_all(b"one\ntw").unwrap();
        b.write_all(b"x").unwrap();
        a.write_all(b"o\nthree").unwrap();
        b.write_all(b"y\n").unwrap();
        a.flush().unwrap();
        assert_eq!(
            String::from_utf8(buf.0.lock().unwrap().clone()).unwrap(),
            "a: one\na: two\nb: xy\na: three\n"
        );
        assert_eq!(da.lines.load(Ordering::Relaxed), 3);
        assert_eq!(da.bytes.load(Ordering::Relaxed), 3 * 3 + 14);
    }

    #[test]
    fn a_long_line_holds_the_turn_until_its_end() {
        let (m, buf, _rx) = merged();
        let (mut a, _) = lane(&m, "");
        let long = vec![b'x'; LONG_LINE + 10];
        a.write_all(&long).unwrap();
        // Another lane's line waits for the long one's end.
        let m2 = m.clone();
        let t = std::thread::spawn(move || {
            let (mut b, _) = lane(&m2, "");
            b.write_all(b"short\n").unwrap();
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        a.write_all(b"yy\nnext\n").unwrap();
        t.join().unwrap();
        let out = buf.0.lock().unwrap().clone();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{}", lines.len());
        assert_eq!(lines[0].len(), LONG_LINE + 12);
        assert!(lines[1..].contains(&"short") && lines[1..].contains(&"next"));
    }

    #[test]
    fn a_lane_cut_inside_a_long_line_ends_that_line() {
        let (m, buf, _rx) = merged();
        let (mut a, _) = lane(&m, "");
        a.write_all(&vec![b'x'; LONG_LINE + 1]).unwrap();
        drop(a);
        let (mut b, _) = lane(&m, "");
        b.write_all(b"b\n").unwrap();
        let out = buf.0.lock().unwrap().clone();
        assert!(out.ends_with(b"x\nb\n"));
    }

    #[test]
    fn giving_up_a_lane_inside_a_long_line_passes_the_turn_on() {
        let (m, buf, _rx) = merged();
        let (mut a, da) = lane(&m, "");
        a.write_all(&vec![b'x'; LONG_LINE + 1]).unwrap();
        // rdpipe gives lane a up while its thread is elsewhere (blocked in
        // the network): the line is ended and the turn passes on.
        da.given_up.store(true, Ordering::SeqCst);
        m.end_long(a.lane, true);
        let (mut b, _) = lane(&m, "");
        b.write_all(b"b\n").unwrap();
        assert!(a.write_all(b"more\n").is_err());
        drop(a);
        let out = buf.0.lock().unwrap().clone();
        assert_eq!(out.len(), LONG_LINE + 1 + 1 + 2);
        assert!(out.ends_with(b"x\nb\n"));
    }

    #[test]
    fn a_dropped_lane_writes_nothing_more() {
        let (m, buf, _rx) = merged();
        let (mut a, da) = lane(&m, "");
        a.write_all(b"1\n").unwrap();
        da.given_up.store(true, Ordering::SeqCst);
        assert!(a.write_all(b"2\n").is_err());
        assert_eq!(buf.0.lock().unwrap().as_slice(), b"1\n");
    }

    #[test]
    fn a_broken_input_is_reported_once_and_stops_every_lane() {
        struct Fails;
        impl Write for Fails {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let m = Merged::new(Box::new(Fails), notify(tx));
        let (mut a, _) = lane(&m, "");
        let (mut b, _) = lane(&m, "");
        assert!(a.write_all(b"1\n").is_err());
        assert!(b.write_all(b"2\n").is_err());
        assert!(matches!(
            rx.try_recv(),
            Ok(MergeEvent::Broken(io::ErrorKind::BrokenPipe, _))
        ));
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn turns_are_first_come_first_served() {
        let turns = Arc::new(Turns::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        turns.take();
        let mut threads = Vec::new();
        for k in 0..4 {
            let (t, order) = (turns.clone(), order.clone());
            threads.push(std::thread::spawn(move || {
                t.take();
                order.lock().unwrap().push(k);
                t.give();
            }));
            // Each asks before the next.
            while turns.tickets.lock().unwrap().0 < k + 2 {
                std::thread::yield_now();
            }
        }
        turns.give();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    }
}
