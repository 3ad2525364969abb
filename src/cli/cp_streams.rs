//! `rdcp --streams N`: the copy as N transfers side by side between the same
//! two hosts, each a whole rdpipe run of its own (connection, keys, send and
//! receive loops, reconnect), so that the CPU of the keyed protection spreads
//! over N cores on each end. What each stream carries and how the pieces of
//! a big file meet again on the destination: `rdpipe_copy::stripe`.
//!
//! `--rate-limit` is shared out: each stream paces at 1/N of it.
//!
//! The runs start together on threads; each its own ssh connections (with
//! `--persist`, one master per host serves them all). The first stream
//! carries the tree and, at its end, waits for the others before it
//! publishes the striped files. One summary for `-v`, one report for
//! `--json` (`{"streams": [...]}`, each stream's run report), one verdict:
//! every stream's error lines, each named by its stream.

use crate::cli::common::{fail, Failure};
use rdpipe_copy::stripe::Stripe;
use rdpipe_orchestrate::run::{run_reported, Config, LocalExe, RunError};
use rdpipe_plan::{Action, Segment};
use rdpipe_report::PipeReport;
use std::path::PathBuf;
use std::time::Instant;

/// `-n`'s line about the streams.
pub fn describe(n: u32) -> String {
    format!(
        "streams: {n} transfers like this one side by side; files of {} MiB or more with one name go in pieces of {} MiB, piece i on stream i mod {n}, the rest of the tree on the first",
        rdpipe_copy::stripe::STRIPE_MIN >> 20,
        rdpipe_wire::entry::PIECE_SIZE >> 20
    )
}

/// The segments of stream `s`.
fn with_stripe(segments: &[Segment], s: Stripe) -> Vec<Segment> {
    let mut segs = segments.to_vec();
    for seg in &mut segs {
        match &mut seg.action {
            Action::Pack { stripe, .. } | Action::Unpack { stripe, .. } => *stripe = Some(s),
            _ => {}
        }
    }
    segs
}

#[derive(serde::Serialize)]
struct StreamsReport<'a> {
    streams: Vec<&'a PipeReport>,
}

/// Runs the copy `segments` (a pack and an unpack) as `n` streams.
pub fn run(
    config: Config,
    segments: &[Segment],
    n: u32,
    json: Option<PathBuf>,
    exe: PathBuf,
) -> Result<(), Failure> {
    let mut id = [0u8; 8];
    getrandom::getrandom(&mut id)
        .map_err(|e| fail(1, format!("no randomness for a run id: {e}")))?;
    let run = u64::from_ne_bytes(id);
    let verbose = config.verbose > 0;
    // `--rate-limit` is the copy's: each stream paces at its share.
    let mut config = config;
    config.rate_limit = config.rate_limit.map(|r| {
        let share = (r.bytes_per_sec() / u64::from(n)).max(1);
        rdpipe_transport::Rate::new(std::num::NonZeroU64::new(share).expect("at least 1"))
    });
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|index| {
            let mut c = config.clone();
            c.prepared = Some(with_stripe(
                segments,
                Stripe {
                    index,
                    count: n,
                    run,
                },
            ));
            c.summary = false;
            // One progress line: the first stream's, which carries the tree.
            c.progress &= index == 0;
            let exe = LocalExe { exe: exe.clone() };
            std::thread::spawn(move || run_reported(c, exe))
        })
        .collect();
    let results: Vec<(Result<(), RunError>, Option<PipeReport>)> = handles
        .into_iter()
        .map(|h| {
            h.join().unwrap_or_else(|_| {
                (
                    Err(RunError::Runtime(std::io::Error::other(
                        "a stream's thread panicked",
                    ))),
                    None,
                )
            })
        })
        .collect();
    let wall = start.elapsed().as_secs_f64();
    if verbose {
        summary(&results, wall);
    }
    let mut messages = Vec::new();
    let mut code = 0;
    for (k, (r, _)) in results.iter().enumerate() {
        if let Err(e) = r {
            messages.extend(e.messages().into_iter().map(|m| format!("stream {k}: {m}")));
            // An interruption's status wins; else the first failure's.
            let c = e.exit_code();
            if code == 0 || c == 130 || c == 143 {
                code = c;
            }
        }
    }
    if let Some(path) = json {
        let reports: Vec<&PipeReport> = results.iter().filter_map(|r| r.1.as_ref()).collect();
        if let Err(e) = rdpipe_report::write_json_atomic(&path, &StreamsReport { streams: reports })
        {
            messages.push(e.to_string());
            code = code.max(1);
        }
    }
    if code == 0 && messages.is_empty() {
        Ok(())
    } else {
        Err(Failure {
            messages,
            code: code.max(1),
        })
    }
}

/// `-v`: each stream's transfer, then the streams together.
fn summary(results: &[(Result<(), RunError>, Option<PipeReport>)], wall: f64) {
    let (mut total, mut secs_max) = (0, 0f64);
    for (k, rep) in results.iter().enumerate() {
        let Some(rep) = &rep.1 else { continue };
        for h in &rep.hops {
            let t = &h.transfer;
            let bytes = t.bytes.unwrap_or(0);
            total += bytes;
            let secs = t.seconds.unwrap_or(0.0);
            secs_max = secs_max.max(secs);
            rdpipe_term::say(
                "rdcp",
                format!(
                    "stream {k}: {} -> {}: {}, {bytes} bytes in {secs:.3} s ({:.3} GB/s)",
                    h.from,
                    h.to,
                    t.transport.as_deref().unwrap_or("-"),
                    if secs > 0.0 {
                        bytes as f64 / secs / 1e9
                    } else {
                        0.0
                    }
                ),
            );
        }
    }
    rdpipe_term::say(
        "rdcp",
        format!(
            "{} streams: {total} bytes in {secs_max:.3} s ({wall:.3} s in all)",
            results.len()
        ),
    );
    // As for one stream: the bytes over the time the transfers took.
    let gbps = if secs_max > 0.0 {
        total as f64 / secs_max / 1e9
    } else {
        0.0
    };
    rdpipe_term::line(&format!("Bandwidth {gbps:.3} GB/s\n"));
}
