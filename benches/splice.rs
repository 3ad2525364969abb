//! Is splice worth it on the TCP sender, given that the end-to-end checksum must
//! see every byte? Figures, not pass/fail: `cargo bench --bench splice [-- MiB]`.
//!
//! Both variants read a page-cached file, hash every byte with xxh3 and put it on a
//! loopback TCP connection in 256 KiB frames (a 4-byte length, then the payload),
//! on one thread; a receiver thread reads and hashes, and the two hashes must match.
//! - `copy`: read(file -> buffer), hash, writev(header, buffer) -> socket. Two
//!   copies on the sender: page cache -> buffer, buffer -> socket.
//! - `splice+tee`: splice(file -> pipe A), tee(A -> pipe B), read(B -> buffer) and
//!   hash, send(header, MSG_MORE), splice(A -> socket). One copy on the sender (for
//!   the checksum); the socket gets page references. Costs three more syscalls per
//!   frame and works only where the input is a file or a pipe.
//!
//! Prints, per variant, the median over alternating runs of wall time, and the CPU
//! time of the sending thread and of the receiving thread (from
//! /proc/thread-self/stat, 10 ms ticks).

use rustix::net::{send, SendFlags};
use rustix::pipe::{fcntl_setpipe_size, pipe, splice, tee, SpliceFlags};
use std::io::{IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Instant;
use xxhash_rust::xxh3::Xxh3;

const FRAME: usize = 256 << 10;

/// user+system CPU seconds of the calling thread.
fn thread_cpu() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let after = s.rsplit_once(") ").map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = after.split(' ').collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn receiver(l: TcpListener) -> std::thread::JoinHandle<(u64, u64, f64)> {
    std::thread::spawn(move || {
        let c0 = thread_cpu();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; FRAME];
        let mut h = Xxh3::new();
        let mut total = 0u64;
        loop {
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).is_err() {
                break;
            }
            let n = u32::from_le_bytes(len) as usize;
            if n == 0 {
                break;
            }
            s.read_exact(&mut buf[..n]).unwrap();
            h.update(&buf[..n]);
            total += n as u64;
        }
        (total, h.digest(), thread_cpu() - c0)
    })
}

fn send_copy(file: &std::path::Path, s: &mut TcpStream) -> (u64, u64) {
    let mut f = std::fs::File::open(file).unwrap();
    let mut buf = vec![0u8; FRAME];
    let mut h = Xxh3::new();
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        let len = (n as u32).to_le_bytes();
        let (mut head, mut body): (&[u8], &[u8]) = (&len, &buf[..n]);
        while !head.is_empty() || !body.is_empty() {
            let k = s
                .write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
                .unwrap();
            let from_head = k.min(head.len());
            head = &head[from_head..];
            body = &body[k - from_head..];
        }
        total += n as u64;
    }
    s.write_all(&0u32.to_le_bytes()).unwrap();
    (total, h.digest())
}

fn send_splice(file: &std::path::Path, s: &mut TcpStream) -> (u64, u64) {
    let f = std::fs::File::open(file).unwrap();
    let (ar, aw): (OwnedFd, OwnedFd) = pipe().unwrap();
    let (br, bw): (OwnedFd, OwnedFd) = pipe().unwrap();
    fcntl_setpipe_size(&aw, FRAME).unwrap();
    fcntl_setpipe_size(&bw, FRAME).unwrap();
    let mut br = std::fs::File::from(br);
    let mut buf = vec![0u8; FRAME];
    let mut h = Xxh3::new();
    let mut total = 0u64;
    loop {
        let n = splice(&f, None, &aw, None, FRAME, SpliceFlags::MOVE).unwrap();
        if n == 0 {
            break;
        }
        let mut teed = 0;
        while teed < n {
            // tee copies from the start of A each time: ask for all n, take what
            // B has room for (B is empty here and as large as A).
            teed = tee(&ar, &bw, n, SpliceFlags::empty()).unwrap();
            assert_eq!(teed, n, "tee short");
        }
        br.read_exact(&mut buf[..n]).unwrap();
        h.update(&buf[..n]);
        send(&*s, &(n as u32).to_le_bytes(), SendFlags::MORE).unwrap();
        let mut left = n;
        while left > 0 {
            left -= splice(&ar, None, &*s, None, left, SpliceFlags::MOVE).unwrap();
        }
        total += n as u64;
    }
    s.write_all(&0u32.to_le_bytes()).unwrap();
    (total, h.digest())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let mib: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1024);
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("rdpipe-bench-splice-{}", std::process::id()));
    let chunk: Vec<u8> = (0..(1usize << 20))
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    {
        let mut f = std::fs::File::create(&path).unwrap();
        for _ in 0..mib {
            f.write_all(&chunk).unwrap();
        }
    }
    type Variant = fn(&std::path::Path, &mut TcpStream) -> (u64, u64);
    let variants: [(&str, Variant); 2] = [("copy", send_copy), ("splice+tee", send_splice)];
    let mut res: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); 2];
    for _round in 0..5 {
        for (i, (_, run)) in variants.iter().enumerate() {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let rx = receiver(l);
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            let (t0, c0) = (Instant::now(), thread_cpu());
            let (n, sum) = run(&path, &mut s);
            drop(s);
            let (rn, rsum, rcpu) = rx.join().unwrap();
            let (wall, scpu) = (t0.elapsed().as_secs_f64(), thread_cpu() - c0);
            assert_eq!((n, sum), (rn, rsum), "streams differ");
            res[i].0.push(wall);
            res[i].1.push(scpu);
            res[i].2.push(rcpu);
        }
    }
    let gb = (mib << 20) as f64 / 1e9;
    println!("splice vs copy on the TCP sender, {mib} MiB, {FRAME} B frames, median of 5");
    for (i, (name, _)) in variants.iter().enumerate() {
        let (w, s, r) = &mut res[i];
        let (w, s, r) = (median(w), median(s), median(r));
        println!(
            "{name:<12} {:6.3} GB/s  sender CPU {:5.3} s/GB  receiver CPU {:5.3} s/GB",
            gb / w,
            s / gb,
            r / gb
        );
    }
    let _ = std::fs::remove_file(&path);
}
