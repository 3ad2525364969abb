//! Hot-loop micro-benchmarks: frame header encode/decode, control frames, the
//! end-to-end checksum, the keyed MAC, AES-256-GCM sealing (one and two threads,
//! and `Sealer::seal`'s 256 KiB pieces of one chunk serial and in parallel),
//! the input loop's fill step, and the whole pump (file -> send loop -> TCP
//! transport over loopback -> receive loop -> sink) in one process, per integrity
//! mode.
//! Figures, not pass/fail: `cargo bench --bench codec`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use rdpipe_wire::{Control, FrameHeader, Integrity, SessionKeys, StreamEnd, StreamHasher};

fn frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    g.bench_function("data header encode+decode", |b| {
        b.iter(|| {
            let h = FrameHeader::data(black_box(1 << 20)).encode();
            FrameHeader::decode(&h, 1 << 20).unwrap()
        })
    });
    let end = Control::End(StreamEnd {
        bytes: 1 << 40,
        checksum: 0x1234_5678_9abc_def0,
        tag: [7; 32],
    });
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
    g.bench_function("xxh3-64 + keyed BLAKE3 MAC 1 MiB chunk", |b| {
        let mut h = StreamHasher::keyed(&[3; 32]);
        b.iter(|| {
            h.update(black_box(&data));
            h.digest()
        })
    });
    g.finish();
    // --encrypt: AES-256-GCM per chunk, on one thread and on two threads sealing
    // independent chunks (the design: a chunk's nonce is its number).
    let key = rdpipe_wire::seal::aead_key(&[5; 32]);
    let mut g = c.benchmark_group("seal");
    for threads in [1usize, 2] {
        g.throughput(Throughput::Bytes((threads * data.len()) as u64));
        g.bench_function(
            format!("AES-256-GCM 1 MiB chunk x {threads} thread(s)"),
            |b| {
                let mut bufs: Vec<Vec<u8>> = (0..threads).map(|_| data.clone()).collect();
                let mut n = 0u64;
                b.iter(|| {
                    std::thread::scope(|sc| {
                        for (t, buf) in bufs.iter_mut().enumerate() {
                            let key = &key;
                            let nonce = n * threads as u64 + t as u64;
                            sc.spawn(move || rdpipe_wire::seal::seal_at(key, nonce, buf));
                        }
                    });
                    n += 1;
                })
            },
        );
    }
    // The chunk format (256 KiB pieces, one tag each) as the send loop seals
    // it: every piece on the calling thread, and the pieces of one chunk on
    // the seal pool (min(cores, 8) threads).
    for mib in [1usize, 4] {
        let n = mib << 20;
        let mut buf: Vec<u8> = data.iter().copied().cycle().take(n).collect();
        buf.resize(rdpipe_wire::seal::sealed_len(n), 0);
        g.throughput(Throughput::Bytes(n as u64));
        for parallel in [false, true] {
            let way = if parallel {
                "pieces in parallel"
            } else {
                "serial"
            };
            g.bench_function(format!("Sealer::seal {mib} MiB chunk, {way}"), |b| {
                let s = rdpipe_wire::seal::Sealer::new(&[5; 32]);
                let mut s = if parallel { s } else { s.single_threaded() };
                b.iter(|| s.seal(black_box(&mut buf), n))
            });
        }
    }
    // A keyed RDMA receiver's copy of a chunk out of its registered slot (one
    // memcpy; the source is in cache here, as a chunk just written by the NIC
    // is with DDIO). Splitting it over the seal pool was measured 6x slower:
    // the hand-off costs more than a 1 MiB copy.
    let src: Vec<u8> = data.iter().copied().cycle().take(1 << 20).collect();
    let mut dst = vec![0u8; src.len()];
    g.throughput(Throughput::Bytes(src.len() as u64));
    g.bench_function("copy 1 MiB chunk, one memcpy", |b| {
        b.iter(|| dst.copy_from_slice(black_box(&src)))
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

fn tcp_pump(c: &mut Criterion) {
    // send_stream -> TcpSender -> loopback -> TcpReceiver -> recv_stream -> sink, with
    // the checksum on both ends, as rdsend/rdrecv run it (minus process start-up and
    // the handshake). Both ends share this process's CPUs, as on one host.
    use rdpipe_transport::pump::{recv_stream, send_stream, Protection};
    use rdpipe_transport::tcp::{TcpReceiver, TcpSender};
    use std::net::{TcpListener, TcpStream};
    const SIZE: usize = 256 << 20;
    let path = std::env::temp_dir().join(format!("rdpipe-bench-pump-{}", std::process::id()));
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 + i / 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    drop(data);
    let mut g = c.benchmark_group("pump");
    g.throughput(Throughput::Bytes(SIZE as u64));
    g.sample_size(10);
    // The receiving thread outlives this frame as far as the borrow checker knows.
    let keys: &'static SessionKeys = Box::leak(Box::new(SessionKeys::derive(b"bench", b"t")));
    let runs = [
        (64usize << 10, Integrity::Checksum),
        (256 << 10, Integrity::Checksum),
        (1 << 20, Integrity::Checksum),
        (256 << 10, Integrity::Mac),
        (256 << 10, Integrity::Encrypt),
    ];
    for (chunk, integrity) in runs {
        let prot = Protection {
            integrity,
            keys,
            compress: rdpipe_wire::Compress::None,
            chunk_size: chunk,
            peer: "peer",
        };
        g.bench_function(
            format!(
                "tcp loopback 256 MiB, chunk {} KiB, {}",
                chunk >> 10,
                integrity.as_str()
            ),
            |b| {
                b.iter(|| {
                    let l = TcpListener::bind("127.0.0.1:0").unwrap();
                    let addr = l.local_addr().unwrap();
                    let rx = std::thread::spawn(move || {
                        let (s, _) = l.accept().unwrap();
                        rdpipe_transport::connect::tune(&s).unwrap();
                        let buf = rdpipe_transport::tcp::buffer_size(
                            chunk,
                            rdpipe_transport::tcp::Frames::Plain,
                        );
                        let mut rx = TcpReceiver::new(s, buf, chunk, "bench".into());
                        recv_stream(&mut rx, &mut std::io::sink(), prot, &mut |_| {}).unwrap()
                    });
                    let s = TcpStream::connect(addr).unwrap();
                    rdpipe_transport::connect::tune(&s).unwrap();
                    let buf = rdpipe_transport::tcp::buffer_size(
                        chunk,
                        rdpipe_transport::tcp::Frames::Plain,
                    );
                    let mut tx = TcpSender::new(s, buf, 2, "bench".into()).unwrap();
                    let mut f = std::fs::File::open(&path).unwrap();
                    let sent = send_stream(&mut f, &mut tx, prot, None, &mut |_| {}).unwrap();
                    drop(tx);
                    let got = rx.join().unwrap();
                    assert_eq!(sent.checksum, got.checksum);
                    got.bytes
                })
            },
        );
    }
    g.finish();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, frames, checksum, fill, tcp_pump);
criterion_main!(benches);
