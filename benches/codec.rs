//! Hot-loop micro-benchmarks: frame header encode/decode, control frames, the
//! end-to-end checksum, and the input loop's fill step. Figures, not pass/fail:
//! `cargo bench --bench codec`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rdpipe_wire::{Control, FrameHeader, StreamHasher};

fn frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    g.bench_function("data header encode+decode", |b| {
        b.iter(|| {
            let h = FrameHeader::data(black_box(1 << 20)).encode();
            FrameHeader::decode(&h, 1 << 20).unwrap()
        })
    });
    let end = Control::End {
        bytes: 1 << 40,
        checksum: 0x1234_5678_9abc_def0,
    };
    g.bench_function("end frame roundtrip", |b| {
        b.iter(|| Control::decode_frame(&black_box(&end).encode()).unwrap())
    });
    g.finish();
}

fn checksum(c: &mut Criterion) {
    let data: Vec<u8> = (0..(1usize << 20))
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("xxh3-64 1 MiB chunk", |b| {
        let mut h = StreamHasher::new();
        b.iter(|| {
            h.update(black_box(&data));
            h.digest()
        })
    });
    g.finish();
}

fn fill(c: &mut Criterion) {
    // The send loop's read step from a page-cached file into a 1 MiB buffer.
    let path = std::env::temp_dir().join(format!("rdpipe-bench-fill-{}", std::process::id()));
    std::fs::write(&path, vec![0x5au8; 64 << 20]).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut g = c.benchmark_group("pump");
    g.throughput(Throughput::Bytes(64 << 20));
    g.bench_function("fill_available 64 MiB page-cached file", |b| {
        b.iter(|| {
            let mut f = std::fs::File::open(&path).unwrap();
            let mut total = 0;
            loop {
                let n = rdpipe_transport::pump::fill_available(&mut f, &mut buf).unwrap();
                if n == 0 {
                    break total;
                }
                total += n;
            }
        })
    });
    g.finish();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, frames, checksum, fill);
criterion_main!(benches);
