//! The numbers `--compress auto` decides by ([`super::adapt`]), each with
//! what it is for and, where a figure chose it, that figure; and the pause
//! they give a probe that lost ([`probe_pays_off_after`]).
//!
//! Counts of "chunks" here are of [`UNIT`]s: the figures were measured with
//! chunks of that size, and a larger chunk counts as the units it holds.

/// The chunk size the counts here were measured at (a TCP frame of 256
/// KiB); a chunk of 1 MiB counts as four ([`super::adapt::Adapt::chunk_size`]).
pub const UNIT: usize = 256 << 10;

/// The [`UNIT`]s a chunk of `bytes` counts as: to the nearest (a full
/// chunk's room is its buffer less a trailer and, sealed, a tag per piece),
/// one at least.
pub(super) fn units(bytes: usize) -> u32 {
    ((bytes + UNIT / 2) / UNIT).clamp(1, MAX_OFF as usize) as u32
}

/// The lowest level `auto` uses.
pub const ADAPT_MIN: i32 = 1;
/// The highest level `auto` uses.
pub const ADAPT_MAX: i32 = 12;
/// The level `auto` starts at.
pub const ADAPT_START: i32 = 1;
/// Under `auto`, chunks are at most [`SMALL_CHUNK`] bytes, and as large as
/// the transport's buffer (4 MiB over TCP where both ends take it) from this
/// level on once the link binds for [`LARGE_LINK_SHARE`] of a window
/// ([`super::Decision::large_chunks`]). A larger chunk compresses better (a
/// tar of /usr/share at level 3: 2.20 × in 1 MiB chunks, 2.27 × in 4 MiB,
/// 2.31 × as one stream) but costs more CPU per byte, as it no longer fits
/// a core's cache between the read, the compression, the seal and the
/// write (on the 2-core VM, `zstd:3` sending 4.0-4.4 against 3.6-3.7 s/GB
/// and receiving 1.2 against 1.05); that pays only where the link binds.
pub const LARGE_FROM_LEVEL: i32 = 3;
/// The share of a window's time the sender must wait on the link for
/// `auto` to compress large chunks: the cores have twice the time the
/// chunks take, so the larger chunks' cost does not make compression bind.
pub const LARGE_LINK_SHARE: f64 = 0.5;
/// The largest chunk `auto` compresses below [`LARGE_FROM_LEVEL`] (an RDMA
/// slot's default size).
pub const SMALL_CHUNK: usize = 1 << 20;
/// Compressed over raw above this: the data does not compress.
pub const INCOMPRESSIBLE: f64 = 0.97;
/// Compressed chunks per decision.
pub const WINDOW: u32 = 8;
/// The share of a window's time a wait must take to be what binds.
pub const BOUND: f64 = 0.10;
/// How much faster than the last stored stretch a window must move the
/// stream to keep compressing: a small margin against timing noise only.
/// Both rates are honest: a stored stretch counts from its first chunk that
/// waited on the link, and the windows after it start with the buffers it
/// filled. On a 1 Gb/s link, stretches of poorly compressible data (`zstd`
/// ratio 0.7-0.87: compressed documents and images in a tar of /usr/share)
/// moved 1.06-1.21 × what storing did; a margin of 1.25 stored them, and
/// with them the compressible data that followed, 16 % of the stream.
pub const KEEP_MARGIN: f64 = 1.05;
/// How much faster than storing the first window after a stretch must move
/// the stream for the pauses to start short again ([`FIRST_OFF`]); one that
/// wins by less goes on compressing, and the next pause is twice the last.
/// On the 2-core VM at 10 Gb/s, where storing is faster, a 2 MiB window
/// now and then moved 1.06-1.12 × storing's rate (once in a while 1.3-1.45
/// ×: a window of a few milliseconds against a stretch measured at 0.7-1.0
/// GB/s where the link carries 1.15), and each reset the pauses to 4 MiB:
/// 17-38 of the 1 MiB chunks of a 384 MiB stream compressed, not 7-9.
pub const CLEAR_WIN: f64 = 1.25;
/// Link-bound windows at the ceiling (one below the last level compression
/// bound at) before the link may raise the level past it again: the data
/// or the load may have changed.
pub const CEILING_HELD: u32 = 32;
/// Wire bytes of compressed chunks since the last stored stretch past which
/// their rate is the link's (more than any socket and receive buffers
/// between the ends hold) and can prove storing's measured rate wrong.
pub const SPAN_WIRE: u64 = 16 << 20;
/// How many times storing's measured rate those bytes must have moved at
/// for that rate to be measured again.
pub const UNDERRATED: f64 = 2.0;
/// Chunks from a stored stretch's first that waited on the link needed
/// to judge storing by them (the stretch goes on for up to `PACED_MIN - 1` more).
pub const PACED_MIN: u32 = 4;
/// Stored stretches whose rates [`Adapt`](super::adapt::Adapt) keeps (it uses their lowest).
pub(super) const STORED_KEPT: usize = 3;
/// Chunks stored without trying after a probe window that lost to storing,
/// the first time.
pub(super) const FIRST_OFF: u32 = 16;
/// Chunks stored without trying after the first incompressible window. A
/// probe of incompressible data costs little (each of its chunks is
/// sampled, `Encoder::worth_trying`: 1/16 of trying it), and a
/// tar of /usr/share mixes compressed files into compressible ones: a pause
/// of 16 after each compressed stretch stored 85 chunks more than `zstd:3`
/// did of 768 (a 300 Mb/s link against two cores, 2.02 × against 2.12 ×).
pub(super) const FIRST_INCOMPRESSIBLE_OFF: u32 = 4;
/// The longest such pause.
pub(super) const MAX_OFF: u32 = 1024;
/// A pause after a probe slower than storing ends in a probe only where
/// at least this share of its stored units waited on the link for half
/// their time (`Stretch::link_idle` in [`super::adapt`]); else it goes on as
/// long again.
pub const LINK_IDLE_SHARE: f64 = 0.125;
/// The most a probe window that compression binds, and that loses to
/// storing, may cost of the time until the next one
/// ([`probe_pays_off_after`]). On a fast link with few cores level 1
/// compresses at a third or a quarter of storing's rate: with pauses
/// doubling from 16 chunks, the probes took 4-5 % of the chunks of a
/// 384 MiB stream over loopback on two cores and cost it about 10 %.
pub const PROBE_SHARE: f64 = 0.02;
/// Compressing's rate over storing's below which a probe is paused for by
/// [`PROBE_SHARE`]; nearer, the pause doubles as before. A stored rate can
/// be measured high (a stretch into drained buffers: 192 MB/s on a 1 Gb/s
/// link), and a long pause on a slow link then stores data that level 1
/// would have moved twice as fast; on a fast link compressing was 0.2-0.47 ×
/// storing. After probes, only once two stretches measured storing (their
/// lowest counts): the first of a stream goes into empty buffers, and on a
/// 1 Gb/s link whose shaper queues 6 MB it measured 285 MB/s, the probe
/// after it 123, and a pause of 525 chunks then stored a third of a 384
/// MiB stream. The stream's first window, compared with the first stretch
/// (`Adapt::first_lost`), compressed into empty buffers too, and gets the
/// long pause on that stretch alone.
pub const FAR_SLOWER: f64 = 0.5;
/// Paced chunks of a long pause after which it ends if they show the link
/// slower than the probes before it (`Stretch::lost_bet` in [`super::adapt`]): 8 MiB
/// on TCP. Stretches into buffers drained by windows that compression
/// bound measured 409 MB/s on a 1 Gb/s link (the lowest of three such), a
/// probe at 192 MB/s then paused for 451 chunks; the link, once the
/// buffers were full, took them at 107-122 MB/s.
pub const PAUSE_CHECKED_AFTER: u32 = 32;
/// Windows (at one level, since the last stored stretch) whose rate is
/// compared with storing's: one window alone swings. On two busy cores at
/// 1 Gb/s, windows at level 1 moved 94-190 MB/s one after the other, a
/// window under storing's rate stored the next 16, 32, 64 chunks, and
/// `auto` stored a third to a half of the stream where `zstd:1` stored 4 %.
pub const RECENT: usize = 3;
/// Windows compressed before the first stretch stored to compare with.
pub const TRIAL_FIRST: u32 = 4;
/// The most windows compressed between two such stretches.
pub const TRIAL_MAX: u32 = 256;

/// Chunks to store before probing again after a window that compression
/// bound at the lowest level and that moved `beats` times storing's rate
/// (under 1): enough that such a probe, if it loses again, costs at most
/// [`PROBE_SHARE`] of the time the stored chunks take (at most
/// [`MAX_OFF`]). A probe of [`WINDOW`] chunks at `beats` takes
/// `WINDOW / beats` stored chunks' time, `WINDOW * (1 / beats - 1)` more
/// than storing them.
pub(super) fn probe_pays_off_after(beats: f64) -> u32 {
    if beats.is_nan() || beats <= 0.0 {
        return MAX_OFF;
    }
    let lost = WINDOW as f64 * (1.0 / beats - 1.0);
    (lost / PROBE_SHARE).ceil().clamp(0.0, MAX_OFF as f64) as u32
}
