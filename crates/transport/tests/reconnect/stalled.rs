//! A hop reset while its receiver is blocked on an output that takes
//! nothing (a consumer that stopped reading): it resumes once the output
//! goes on, however long the stall.

use crate::proxy::{data, dial, listen_announcing, opts, test_chain, Proxy, Shared};
use rdpipe_transport::chain::{run_recv_chain, run_send_chain};
use rdpipe_transport::replay::Recorded;
use rdpipe_transport::{run_recv, run_send, Endpoint};
use rdpipe_wire::Integrity;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// An output whose consumer stops reading once it holds `at` bytes (as
/// `zfs recv` does while it commits), until the test opens it again.
#[derive(Clone)]
struct Stalling {
    out: Shared,
    at: usize,
    /// Set by the output once a write waits; by the test to let it go on.
    blocked: Arc<AtomicBool>,
    open: Arc<AtomicBool>,
}

impl Write for Stalling {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        while self.out.len() >= self.at && !self.open.load(Ordering::SeqCst) {
            self.blocked.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(5));
        }
        self.out.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The hop's connection is reset while the receiver is blocked on its
/// stalled output, and the stall outlasts both ends' `--reconnect-timeout`
/// (2 s) and `--handshake-timeout` (1 s): the receiver's acceptor takes the
/// sender's new connection and holds it, and the stream resumes once the
/// output takes bytes again (a listening receiver's acceptor holds the
/// sender's new connection; a dialing receiver's thread dials and holds
/// it); a standalone hop and a fan-out chain's hop, either end listening.
#[test]
fn a_reset_while_the_receivers_output_is_stalled_resumes() {
    let input = data(16 << 20);
    for (chain, dials) in [(false, false), (true, false), (false, true), (true, true)] {
        let case = format!("chain {chain}, receiver dials {dials}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("input");
        std::fs::write(&path, &input).unwrap();
        let quick = || {
            let mut o = opts(Integrity::Mac, 32 << 20, Duration::from_secs(2));
            o.handshake_timeout = Duration::from_secs(1);
            o.rate_limit = None;
            o
        };
        let out = Stalling {
            out: Shared::default(),
            at: 4 << 20,
            blocked: Arc::default(),
            open: Arc::default(),
        };
        // The proxy's side: whoever listens announces its port.
        let (port_tx, port_rx) = mpsc::channel();
        let (proxy_tx, proxy_rx) = mpsc::channel::<u16>();
        let (recv_ep, send_ep) = if dials {
            (
                Box::new(move || dial(proxy_rx.recv().unwrap()))
                    as Box<dyn FnOnce() -> Endpoint + Send>,
                Box::new(move || listen_announcing(port_tx))
                    as Box<dyn FnOnce() -> Endpoint + Send>,
            )
        } else {
            (
                Box::new(move || listen_announcing(port_tx))
                    as Box<dyn FnOnce() -> Endpoint + Send>,
                Box::new(move || dial(proxy_rx.recv().unwrap()))
                    as Box<dyn FnOnce() -> Endpoint + Send>,
            )
        };
        let recv = {
            let out = out.clone();
            std::thread::spawn(move || {
                let ep = recv_ep();
                if chain {
                    let c = test_chain();
                    return run_recv_chain(ep, quick(), move || Ok(out), c);
                }
                run_recv(ep, quick(), move || Ok(out))
            })
        };
        let send = std::thread::spawn({
            move || {
                let ep = send_ep();
                let mut f = std::fs::File::open(path).unwrap();
                if chain {
                    let c = test_chain();
                    return run_send_chain(ep, quick(), &mut Recorded::new(f, 32 << 20), c);
                }
                run_send(ep, quick(), &mut f)
            }
        });
        let proxy = Proxy::start(port_rx.recv().unwrap(), false);
        proxy_tx.send(proxy.port).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !out.blocked.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        proxy.cut();
        std::thread::sleep(Duration::from_secs(5));
        out.open.store(true, Ordering::SeqCst);
        let (s, r) = (send.join().unwrap(), recv.join().unwrap());
        let (s, r) = (
            s.unwrap_or_else(|e| panic!("{case}: the sender failed: {e}")),
            r.unwrap_or_else(|e| panic!("{case}: the receiver failed: {e}")),
        );
        let got = out.out.0.lock().unwrap().clone();
        assert!(got == input, "{case}: output differs ({} bytes)", got.len());
        assert_eq!(s.checksum, r.checksum);
        assert!(
            !s.reconnects.is_empty() && !r.reconnects.is_empty(),
            "{case}: {} / {} reconnects",
            s.reconnects.len(),
            r.reconnects.len()
        );
    }
}
