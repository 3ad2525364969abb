//! rdcp's receiving side alone: a packed tree of small files (sizes spread
//! around 4 KiB, 100 per directory) unpacked into a fresh directory on
//! /dev/shm (else the temporary directory), with the small files created on
//! 1 (the decoding thread), 2 and 4 threads. It tells whether the file
//! system and the cores here create files faster in parallel, apart from a
//! sender competing for the same cores. Figures, not pass/fail:
//! `cargo bench --bench unpack`; `RDCP_BENCH_THREADS=1,4,8,16` picks the
//! thread counts, `RDCP_BENCH_DIR` the file system (default /dev/shm).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rdpipe_copy::{pack, Dest, PackOptions, Unpacker};
use std::io::Write;
use std::path::{Path, PathBuf};

const FILES: usize = 5000;

fn scratch() -> PathBuf {
    if let Some(d) = std::env::var_os("RDCP_BENCH_DIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The tree, packed: sizes from a fixed sequence between 64 B and 64 KiB
/// (median about 4 KiB), not compressible.
fn packed() -> Vec<u8> {
    let src = tempfile::tempdir_in(scratch()).expect("scratch");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..FILES {
        let d = src.path().join(format!("tree/d{:03}", i / 100));
        std::fs::create_dir_all(&d).expect("mkdir");
        let size = 64usize << (next() % 11);
        let data: Vec<u8> = (0..size).map(|_| next() as u8).collect();
        std::fs::write(d.join(format!("f{i:05}")), data).expect("write");
    }
    let mut out = Vec::new();
    let opts = PackOptions {
        recursive: true,
        xattrs: false,
        specials: false,
        direct: false,
        stripe: None,
    };
    pack(&[src.path().join("tree")], opts, None, &mut out).expect("pack");
    out
}

fn unpack(c: &mut Criterion) {
    let stream = packed();
    let mut g = c.benchmark_group("unpack");
    g.sample_size(10);
    g.throughput(Throughput::Elements(FILES as u64));
    let threads: Vec<usize> = std::env::var("RDCP_BENCH_THREADS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4]);
    for threads in threads {
        g.bench_function(format!("{FILES} small files, {threads} threads"), |b| {
            b.iter_batched(
                || tempfile::tempdir_in(scratch()).expect("dest"),
                |dst| {
                    let d = Dest::open(dst.path(), true, None).expect("dest");
                    let mut u = Unpacker::new(d, "dst", true).with_create_threads(threads);
                    for piece in stream.chunks(1 << 20) {
                        u.write_all(piece).expect("unpack");
                    }
                    u.flush().expect("verdict");
                    drop(u);
                    dst
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, unpack);
criterion_main!(benches);
