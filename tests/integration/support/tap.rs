//! A passive tap in a network namespace: an AF_PACKET socket (every frame on
//! every interface of the namespace, in and out) on a thread moved into it,
//! keeping each IPv4 TCP segment's payload; [`Capture`] puts each direction
//! of each connection back in order (by sequence number, retransmissions and
//! the copies a bridge and its ports both show dropped). Root only.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddrV4;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One TCP segment seen.
struct Seen {
    from: SocketAddrV4,
    to: SocketAddrV4,
    seq: u32,
    payload: Vec<u8>,
}

/// A running tap; [`Tap::stop`] ends it and gives what it saw.
pub struct Tap {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Seen>>,
}

/// ETH_P_ALL (0x0003) in network byte order, as a protocol number.
const ETH_P_ALL_BE: u32 = 0x0003u16.to_be() as u32;

/// The TCP segment in an Ethernet frame: (from, to, seq, payload).
fn tcp_of(frame: &[u8]) -> Option<Seen> {
    let ip = frame.get(14..)?;
    if frame.get(12..14)? != [0x08, 0x00] || ip.first()? >> 4 != 4 || *ip.get(9)? != 6 {
        return None;
    }
    let ihl = ((ip[0] & 0x0f) as usize) * 4;
    let total = u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]) as usize;
    let ip = ip.get(..total.min(ip.len()))?;
    let tcp = ip.get(ihl..)?;
    let off = ((*tcp.get(12)? >> 4) as usize) * 4;
    let addr = |a: &[u8], p: &[u8]| {
        SocketAddrV4::new(
            [a[0], a[1], a[2], a[3]].into(),
            u16::from_be_bytes([p[0], p[1]]),
        )
    };
    Some(Seen {
        from: addr(ip.get(12..16)?, tcp.get(0..2)?),
        to: addr(ip.get(16..20)?, tcp.get(2..4)?),
        seq: u32::from_be_bytes(tcp.get(4..8)?.try_into().ok()?),
        payload: tcp.get(off..)?.to_vec(),
    })
}

impl Tap {
    /// Starts tapping namespace `ns` (a name under /run/netns); returns once
    /// the socket is open.
    pub fn start(ns: &str) -> Tap {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let path = format!("/run/netns/{ns}");
        let halt = stop.clone();
        let thread = std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            rustix::thread::move_into_link_name_space(
                f.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns into the tapped namespace");
            let proto =
                rustix::net::RawProtocol::new(ETH_P_ALL_BE).map(rustix::net::Protocol::from_raw);
            let s = rustix::net::socket(
                rustix::net::AddressFamily::PACKET,
                rustix::net::SocketType::RAW,
                proto,
            )
            .expect("an AF_PACKET socket");
            rustix::net::sockopt::set_socket_timeout(
                &s,
                rustix::net::sockopt::Timeout::Recv,
                Some(Duration::from_millis(50)),
            )
            .unwrap();
            let _ = ready_tx.send(());
            let mut seen = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            while !halt.load(Ordering::SeqCst) {
                if let Ok(n) = rustix::net::recv(&s, &mut buf, rustix::net::RecvFlags::empty()) {
                    if let Some(t) = tcp_of(&buf[..n]).filter(|t| !t.payload.is_empty()) {
                        seen.push(t);
                    }
                }
            }
            // Whatever is still queued.
            while let Ok(n) = rustix::net::recv(&s, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
                if let Some(t) = tcp_of(&buf[..n]).filter(|t| !t.payload.is_empty()) {
                    seen.push(t);
                }
            }
            seen
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the tap started");
        Tap { stop, thread }
    }

    /// Stops the tap: what it captured.
    pub fn stop(self) -> Capture {
        self.stop.store(true, Ordering::SeqCst);
        let seen = self.thread.join().expect("the tap thread");
        let mut by: HashMap<(SocketAddrV4, SocketAddrV4), BTreeMap<u32, Vec<u8>>> = HashMap::new();
        let mut base: HashMap<(SocketAddrV4, SocketAddrV4), u32> = HashMap::new();
        let segments = seen.len();
        for s in seen {
            let k = (s.from, s.to);
            let b = *base.entry(k).or_insert(s.seq);
            by.entry(k)
                .or_default()
                .entry(s.seq.wrapping_sub(b))
                .or_insert(s.payload);
        }
        let flows = by
            .into_iter()
            .map(|(k, segs)| {
                let mut stream = Vec::new();
                let mut next = 0u64;
                for (at, p) in segs {
                    let (at, end) = (at as u64, at as u64 + p.len() as u64);
                    if end <= next {
                        continue;
                    }
                    let skip = next.saturating_sub(at) as usize;
                    stream.extend_from_slice(&p[skip..]);
                    next = end;
                }
                (k, stream)
            })
            .collect();
        Capture { flows, segments }
    }
}

/// What a [`Tap`] saw: each direction of each TCP connection, in order.
pub struct Capture {
    /// (from, to) → the bytes sent that way.
    pub flows: Vec<((SocketAddrV4, SocketAddrV4), Vec<u8>)>,
    /// How many TCP segments with a payload were seen.
    pub segments: usize,
}

impl Capture {
    /// Whether any direction of any connection carried `needle`.
    pub fn contains(&self, needle: &[u8]) -> bool {
        !needle.is_empty()
            && self
                .flows
                .iter()
                .any(|(_, s)| s.windows(needle.len()).any(|w| w == needle))
    }

    /// Every run of 64 hex digits anywhere in the captured bytes (a 32-byte
    /// key as the control protocol writes it), decoded: each window of each
    /// longer run too.
    pub fn hex_key_candidates(&self) -> Vec<Vec<u8>> {
        let mut out = std::collections::BTreeSet::new();
        for (_, s) in &self.flows {
            let mut run = 0usize;
            for (i, b) in s.iter().enumerate() {
                run = if b.is_ascii_hexdigit() { run + 1 } else { 0 };
                if run >= 64 {
                    let hex = std::str::from_utf8(&s[i + 1 - 64..=i]).unwrap();
                    let key: Vec<u8> = (0..64)
                        .step_by(2)
                        .map(|j| u8::from_str_radix(&hex[j..j + 2], 16).unwrap())
                        .collect();
                    out.insert(key);
                }
            }
        }
        out.into_iter().collect()
    }
}
