//! Tests of the sender's side of `--compress` ([`super::Packer`]).

use super::*;
use rdpipe_wire::compress::Decoder;

/// Pieces of input, then an error or the end; `ready` as told.
struct Script {
    pieces: VecDeque<io::Result<Vec<u8>>>,
    ready: bool,
    reads: usize,
}

impl Script {
    /// `pieces` in order, then the end.
    fn of(pieces: &[Vec<u8>], ready: bool) -> Script {
        Script {
            pieces: pieces.iter().cloned().map(Ok).collect(),
            ready,
            reads: 0,
        }
    }
}

impl Source for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.reads += 1;
        match self.pieces.pop_front() {
            None => Ok(0),
            Some(Err(e)) => Err(e),
            Some(Ok(p)) => {
                buf[..p.len()].copy_from_slice(&p);
                Ok(p.len())
            }
        }
    }
    fn ready(&mut self) -> bool {
        self.ready
    }
}

fn pieces(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut p = vec![i as u8; 60_000];
            // Every other piece random: it goes stored.
            if i % 2 == 1 {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
                for b in p.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
            }
            p
        })
        .collect()
}

#[test]
fn chunks_come_back_in_order_then_the_input_error() {
    for mode in [Compress::Auto, Compress::Zstd(3), Compress::Zstd(1)] {
        let want = pieces(9);
        let mut src = Script::of(&want, true);
        src.pieces
            .push_back(Err(io::Error::other("the command failed")));
        let mut p = Packer::new(mode, None);
        let mut d = Decoder::new(1 << 20);
        let mut buf = vec![0u8; 64 << 10];
        for (i, w) in want.iter().enumerate() {
            let n = p.next(&mut buf, &mut src).unwrap();
            assert!(n > 0, "{mode} chunk {i}");
            assert_eq!(d.decode(&buf[..n]).unwrap(), &w[..], "{mode} chunk {i}");
        }
        let e = p.next(&mut buf, &mut src).unwrap_err();
        assert_eq!(e.to_string(), "the command failed");
        let s = p.stats;
        assert_eq!(s.raw, 9 * 60_000);
        assert_eq!(s.chunks, 9);
        assert!(s.stored >= 4, "{mode}: {s:?}");
        assert!(s.wire < s.raw, "{mode}: {s:?}");
    }
}

#[test]
fn a_pause_on_incompressible_data_reads_straight_into_the_buffer() {
    // Every piece random: after the first window `auto` pauses for 16
    // chunks; once the chunks on the pool are out, each paused chunk is
    // read into the caller's buffer when asked for, not ahead of it.
    let random: Vec<Vec<u8>> = pieces(60).into_iter().skip(1).step_by(2).collect();
    let mut src = Script::of(&random, true);
    let mut p = Packer::new(Compress::Auto, None);
    let mut d = Decoder::new(1 << 20);
    let mut buf = vec![0u8; 64 << 10];
    let mut straight = 0;
    for (i, w) in random.iter().enumerate() {
        let n = p.next(&mut buf, &mut src).unwrap();
        assert_eq!(d.decode(&buf[..n]).unwrap(), &w[..], "chunk {i}");
        straight += usize::from(src.reads == i + 1);
    }
    assert_eq!(p.next(&mut buf, &mut src).unwrap(), 0);
    let depth = MAX_WORKERS + 1;
    assert!(straight >= 16 - depth, "{straight} chunks read straight");
    assert_eq!(p.stats.stored, 30);
}

#[test]
fn nothing_is_read_ahead_of_input_that_is_not_ready() {
    let mut src = Script::of(&pieces(3), false);
    let mut p = Packer::new(Compress::Zstd(3), None);
    let mut buf = vec![0u8; 64 << 10];
    for i in 1..=3 {
        p.next(&mut buf, &mut src).unwrap();
        assert_eq!(src.reads, i, "chunk {i} waited for more input");
    }
    assert_eq!(p.next(&mut buf, &mut src).unwrap(), 0);
}

/// A chunk whose 4 KiB slices do not shrink but whose whole does: one
/// random block of 6,000 bytes, ten times.
fn long_matches() -> Vec<u8> {
    let block = &pieces(2)[1][..6000];
    block.repeat(10)
}

#[test]
fn a_chunk_after_one_that_compressed_is_tried_whole() {
    // As the first chunk, its samples decide: stored. After a chunk that
    // compressed, it is tried whole: compressed.
    for (input, stored) in [
        (vec![long_matches()], 1),
        (vec![vec![7u8; 60_000], long_matches()], 0),
    ] {
        let mut src = Script::of(&input, false);
        let mut p = Packer::new(Compress::Auto, None);
        let mut d = Decoder::new(1 << 20);
        let mut buf = vec![0u8; 64 << 10];
        for w in &input {
            let n = p.next(&mut buf, &mut src).unwrap();
            assert_eq!(d.decode(&buf[..n]).unwrap(), &w[..]);
        }
        assert_eq!(p.next(&mut buf, &mut src).unwrap(), 0);
        assert_eq!(p.stats.stored, stored, "{:?}", p.stats);
    }
}

#[test]
fn a_buffer_without_room_for_the_trailer_is_an_error() {
    let mut src = Script::of(&[], true);
    let mut p = Packer::new(Compress::Auto, None);
    assert!(p.next(&mut [0u8; TRAILER_LEN], &mut src).is_err());
}

/// Endless input, random or all zeros, as much as each read asks for;
/// records the sizes asked.
struct Endless {
    random: bool,
    x: u64,
    asked: Vec<usize>,
}

impl Source for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.asked.push(buf.len());
        for b in buf.iter_mut() {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            *b = if self.random { self.x as u8 } else { 0 };
        }
        Ok(buf.len())
    }
    fn ready(&mut self) -> bool {
        true
    }
}

#[test]
fn chunks_stored_or_sampled_are_read_at_the_plain_size() {
    // A 256 KiB buffer where the transport's plain chunk is 64 KiB: random
    // data (sampled, then paused) is read 64 KiB at a time; data that
    // compresses, once its first chunk compressed, fills the buffer.
    for random in [true, false] {
        let mut src = Endless {
            random,
            x: 0x9e37_79b9_7f4a_7c15,
            asked: Vec::new(),
        };
        let mut p = Packer::new(Compress::Auto, None).plain_chunk(Some(64 << 10));
        let mut buf = vec![0u8; (256 << 10) + TRAILER_LEN];
        for _ in 0..40 {
            assert!(p.next(&mut buf, &mut src).unwrap() > 0);
        }
        assert_eq!(
            src.asked[0],
            64 << 10,
            "random {random}: the first chunk is sampled"
        );
        if random {
            let later = &src.asked[1..];
            assert!(later.iter().all(|n| *n == 64 << 10), "{later:?}");
        } else {
            // The chunks read ahead while the first was on the pool are
            // sampled too; the first read after its result fills the
            // buffer. (Which later chunks `auto` stores to measure storing
            // depends on timing.)
            let full = src.asked.iter().position(|n| *n == 256 << 10);
            let full = full.expect("full reads");
            assert!(full <= MAX_WORKERS + 1, "{:?}", src.asked);
        }
    }
}

#[test]
fn only_auto_where_the_link_binds_compresses_chunks_larger_than_the_short_one() {
    let big = 4 << 20;
    let mut p = Packer::new(Compress::Auto, None);
    p.room = big;
    p.sample = false;
    assert_eq!(p.compressed_size(), SMALL_CHUNK);
    assert_eq!(p.counted, SMALL_CHUNK);
    p.large = true;
    assert_eq!(p.compressed_size(), big);
    assert_eq!(p.counted, big, "auto counts its windows by the size in use");
    // After a chunk that did not shrink: short.
    p.sample = true;
    assert_eq!(p.compressed_size(), SMALL_CHUNK);
    assert_eq!(p.counted, SMALL_CHUNK);
    // A buffer no larger than the short chunk (an RDMA slot): all of it.
    p.room = 256 << 10;
    p.sample = false;
    assert_eq!(p.compressed_size(), 256 << 10);
    // A fixed level keeps to the short chunk, whatever the data.
    for random in [false, true] {
        let mut src = Endless {
            random,
            x: 1,
            asked: Vec::new(),
        };
        let mut p = Packer::new(Compress::Zstd(1), None).plain_chunk(Some(256 << 10));
        let mut buf = vec![0u8; big + TRAILER_LEN];
        for _ in 0..(MAX_WORKERS + 8) {
            assert!(p.next(&mut buf, &mut src).unwrap() > 0);
        }
        let asked = &src.asked;
        assert!(asked.iter().all(|n| *n == SMALL_CHUNK), "{asked:?}");
    }
}

#[test]
fn a_probe_window_reads_no_further_ahead_than_it_needs() {
    // 1 MiB chunks, nine allowed on the pool (a 16-core host): the
    // stream's first window, a probe of two chunks, reads two, not nine,
    // before it decides.
    let mib = 1 << 20;
    let mut src = Endless {
        random: false,
        x: 1,
        asked: Vec::new(),
    };
    let mut p = Packer::new(Compress::Auto, None);
    (p.room, p.counted, p.depth, p.sample) = (mib, mib, MAX_WORKERS + 1, false);
    p.adapt.chunk_size(mib);
    let mut buf = vec![0u8; mib + TRAILER_LEN];
    while p.adapt.last_binding().is_none() {
        assert!(p.next(&mut buf, &mut src).unwrap() > 0);
    }
    let read: usize = src.asked.iter().sum();
    assert_eq!(read, 2 * mib, "{:?}", src.asked);
    // A fixed level reads ahead as far as the pool takes.
    let mut src = Endless {
        random: false,
        x: 1,
        asked: Vec::new(),
    };
    let mut p = Packer::new(Compress::Zstd(1), None);
    (p.room, p.counted, p.depth, p.sample) = (mib, mib, MAX_WORKERS + 1, false);
    assert!(p.next(&mut buf, &mut src).unwrap() > 0);
    assert_eq!(src.asked.len(), MAX_WORKERS + 1);
}
