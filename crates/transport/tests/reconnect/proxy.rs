//! What the reconnect tests share: the options of a test hop, an output
//! the test reads while it grows, and the proxy that resets connections.

use rdpipe_transport::chain::{Chain, RelinkPoll};
use rdpipe_transport::{Endpoint, Options, Rate};
use rdpipe_wire::{Compress, Integrity, TransportPref};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub(crate) fn opts(integrity: Integrity, window: usize, reconnect: Duration) -> Options {
    Options {
        key: b"reconnect test key".to_vec(),
        chunk_size: 256 << 10,
        slots: 2,
        transport: TransportPref::Tcp,
        handshake_timeout: Duration::from_secs(5),
        integrity,
        // Slow enough that the cuts land mid-stream.
        rate_limit: Some(Rate::new(NonZeroU64::new(64 << 20).unwrap())),
        compress: Compress::None,
        progress: None,
        reconnect_timeout: reconnect,
        replay_window: window,
        notice: None,
    }
}

/// An output the test can read while it grows.
#[derive(Clone, Default)]
pub(crate) struct Shared(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Shared {
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A proxy to `port` whose connections the test can cut with a reset (as a
/// middlebox that drops a connection does; a clean close would be the peer
/// ending). With `replay`, the connection after each cut gets the dead
/// connection's client bytes first (an attacker replaying a recorded
/// session), then is reset.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    /// Bumped by [`Proxy::cut`]: every pump of an older generation resets
    /// its connection and ends.
    generation: Arc<AtomicUsize>,
    /// Set: new connections are closed at once (the peer is unreachable).
    pub(crate) closed: Arc<AtomicBool>,
}

/// Copies `from` to `to` until either fails or the generation moves on,
/// then closes both with a reset (the last descriptors of both sockets are
/// the two pumps' own).
pub(crate) fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    gen: Arc<AtomicUsize>,
    mine: usize,
    record: Option<Arc<Mutex<Vec<u8>>>>,
) {
    from.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut buf = vec![0u8; 64 << 10];
    while gen.load(Ordering::SeqCst) == mine {
        let n = match from.read(&mut buf) {
            Ok(n) if n > 0 => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => continue,
            // One end closed its connection: the other end sees the close.
            Ok(_) => {
                let _ = to.shutdown(std::net::Shutdown::Write);
                break;
            }
            // One end reset its connection: the other pump ends too (it
            // reads an end of file), and both connections close with a
            // reset, as the other end's would without the proxy.
            Err(_) => {
                let _ = to.shutdown(std::net::Shutdown::Read);
                break;
            }
        };
        if let Some(r) = &record {
            let mut r = r.lock().unwrap();
            if r.len() < 1 << 20 {
                r.extend_from_slice(&buf[..n]);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    for s in [&from, &to] {
        let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
    }
}

impl Proxy {
    pub(crate) fn start(port: u16, replay: bool) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let me = l.local_addr().unwrap().port();
        let generation = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicBool::new(false));
        let recorded: Arc<Mutex<Vec<u8>>> = Arc::default();
        let (gen, closed2) = (generation.clone(), closed.clone());
        std::thread::spawn(move || {
            let mut replay_next = false;
            for client in l.incoming() {
                let Ok(client) = client else { return };
                if closed2.load(Ordering::SeqCst) {
                    let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
                    continue;
                }
                let mut server = TcpStream::connect(("127.0.0.1", port)).unwrap();
                if replay && replay_next {
                    // The attacker's connection: the old bytes, then gone.
                    replay_next = false;
                    let old = recorded.lock().unwrap().clone();
                    let _ = server.write_all(&old);
                    std::thread::sleep(Duration::from_millis(200));
                    for s in [&server, &client] {
                        let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
                    }
                    continue;
                }
                replay_next = true;
                recorded.lock().unwrap().clear();
                let mine = gen.load(Ordering::SeqCst);
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (g1, g2, rec) = (gen.clone(), gen.clone(), recorded.clone());
                std::thread::spawn(move || pump(s2, c2, g1, mine, None));
                std::thread::spawn(move || pump(client, server, g2, mine, Some(rec)));
            }
        });
        Proxy {
            port: me,
            generation,
            closed,
        }
    }

    /// Resets every connection it carries now.
    pub(crate) fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// Listens on an ephemeral loopback port, sending its number to `port_tx`.
pub(crate) fn listen_announcing(port_tx: mpsc::Sender<u16>) -> Endpoint {
    Endpoint::Listen {
        bind: Some("127.0.0.1".into()),
        port: 0,
        announce: Some(Box::new(move |p| {
            port_tx.send(p).unwrap();
            Ok(())
        })),
    }
}

pub(crate) fn data(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub(crate) fn dial(port: u16) -> Endpoint {
    Endpoint::Connect {
        host: "127.0.0.1".into(),
        port,
        timeout: Duration::from_secs(5),
    }
}

/// A fan-out chain's re-link order that never comes (both ends of the hop
/// live: it must reconnect by itself).
pub(crate) fn no_relink(_at: u64, wait: Duration) -> RelinkPoll {
    std::thread::sleep(wait);
    RelinkPoll::NotYet
}

/// A fan-out chain hop's part whose re-link never comes ([`no_relink`]).
pub(crate) fn test_chain() -> Chain<'static> {
    Chain {
        secret: b"chain secret",
        relink: Box::leak(Box::new(no_relink)),
        wait: Duration::from_secs(1),
    }
}
