//! rdpipe's own ends of the pipeline: the sender of its stdin into the first
//! hop and the receiver of the last hop into its stdout. Each is one
//! rdsend/rdrecv-style transfer in a thread, started once the listening end
//! announced its port, and reports its outcome as an event.

use super::verdict::Cause;
use super::{Event, Runner};
use rdpipe_control::{Direction, HopReport};
use rdpipe_plan::Node;
use rdpipe_transport::error::EXIT_ABORTED;
use rdpipe_transport::{run_recv, run_send, Endpoint, Options, Report, TransportError};
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

impl Runner {
    fn transfer_options(&self, key: Vec<u8>, counter: &Arc<AtomicU64>) -> Options {
        Options {
            key,
            chunk_size: self.config.chunk_size,
            slots: self.config.slots,
            transport: self.config.transport,
            handshake_timeout: Duration::from_secs(self.config.handshake_timeout),
            integrity: self.config.integrity,
            rate_limit: self.config.rate_limit,
            compress: self.config.compress,
            // A progress callback storing into `counter`, when there is a line.
            progress: self.progress.as_ref().map(|_| {
                let c = counter.clone();
                Box::new(move |n| c.store(n, Ordering::Relaxed)) as Box<dyn FnMut(u64) + Send>
            }),
            reconnect_timeout: Duration::from_secs(self.config.reconnect_timeout),
            replay_window: self.config.replay_window,
            notice: None,
        }
    }

    fn connect_to(&self, host: String, port: u16) -> Endpoint {
        Endpoint::Connect {
            host,
            port,
            timeout: Duration::from_secs(self.config.connect_timeout),
        }
    }

    /// Sends rdpipe's stdin to the first hop's listener at `addr`:`port`.
    pub(super) fn start_source(&mut self, addr: String, port: u16) {
        debug!("sending rdpipe's stdin to {addr} port {port}");
        let key = self
            .hop_key(Node::Stdin, Direction::Out)
            .unwrap_or_default();
        let opts = self.transfer_options(key, &self.ends.source_bytes);
        let ep = self.connect_to(addr, port);
        let tx = self.events.tx.clone();
        std::thread::spawn(move || {
            let r = rustix::io::dup(std::io::stdin())
                .map_err(|e| TransportError::Input(e.into()))
                .and_then(|fd| run_send(ep, opts, &mut File::from(fd)));
            let _ = tx.send(Event::Source(r));
        });
    }

    /// Receives the last hop from its listener at `addr`:`port` into stdout.
    pub(super) fn start_sink(&mut self, addr: String, port: u16) {
        debug!("receiving rdpipe's stdout from {addr} port {port}");
        let key = self
            .hop_key(Node::Stdout, Direction::In)
            .unwrap_or_default();
        let opts = self.transfer_options(key, &self.ends.sink_bytes);
        let ep = self.connect_to(addr, port);
        let tx = self.events.tx.clone();
        std::thread::spawn(move || {
            let r = run_recv(ep, opts, rdpipe_transport::endpoint::stdout_output);
            let _ = tx.send(Event::Sink(r));
        });
    }

    pub(super) fn source_ended(&mut self, r: Result<Report, TransportError>) {
        self.ends.source_done = true;
        match r {
            Ok(rep) => self.ends.source_report = Some(HopReport::of(&rep)),
            Err(e) => {
                let to = self.plan.hop_from(Node::Stdin).map(|h| h.to);
                let name = to.map(|n| self.plan.node_name(n)).unwrap_or_default();
                let echo = e.exit_code() == EXIT_ABORTED;
                let cause = Cause::Transfer {
                    text: format!("sending rdpipe's stdin to {name} failed: {e}"),
                    echo,
                };
                if !echo {
                    self.peer_lost(Node::Stdin, to);
                }
                self.fail(Some(Node::Stdin), cause);
            }
        }
    }

    pub(super) fn sink_ended(&mut self, r: Result<Report, TransportError>) {
        self.ends.sink_done = true;
        match r {
            Ok(rep) => self.ends.sink_report = Some(HopReport::of(&rep)),
            Err(TransportError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                self.fail(Some(Node::Stdout), Cause::StdoutClosed);
            }
            Err(e) => {
                let from = self.plan.hop_into(Node::Stdout).map(|h| h.from);
                let name = from.map(|n| self.plan.node_name(n)).unwrap_or_default();
                let echo = e.exit_code() == EXIT_ABORTED;
                let cause = Cause::Transfer {
                    text: format!("receiving rdpipe's stdout from {name} failed: {e}"),
                    echo,
                };
                if !echo {
                    self.peer_lost(Node::Stdout, from);
                }
                self.fail(Some(Node::Stdout), cause);
            }
        }
    }
}
