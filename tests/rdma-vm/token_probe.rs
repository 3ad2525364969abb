//! Test probe for `tests/rdma-vm/rdma-suite.sh` (built as the root package's
//! example `rdma_token_probe`, so `cargo build --release --examples` puts it where
//! the suite looks: `target/release/examples/`): proves that an rdma_cm connect
//! request without the one-time token is rejected by the receiver's listener.
//!
//! It authenticates as a sender (it knows the key), reads the receiver's
//! `RdmaOffer`, and connects to the offered rdma_cm port with a WRONG token. The
//! receiver must answer REJECTED (and reveal nothing about its memory). The probe
//! then declines RDMA over TCP and exits.
//!
//! usage: `rdma_token_probe HOST PORT KEY`; prints `PROBE: wrong token rejected`
//! and exits 0 when the receiver behaved, else says what happened and exits 1.

use rdpipe_transport::connect::connect_retry;
use rdpipe_transport::frame_io::{read_control, write_control};
use rdpipe_transport::handshake::{handshake, LocalParams};
use rdpipe_verbs::{
    CmEventKind, CompletionChannel, CompletionQueue, EventChannel, ProtectionDomain, QpCaps,
    QueuePair,
};
use rdpipe_wire::frame::{Chosen, RDMA_TOKEN_LEN};
use rdpipe_wire::{Caps, Control, Integrity, Role, TransportPref};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

fn run(host: &str, port: u16, key: &str) -> Result<String, String> {
    let mut s = connect_retry(host, port, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    let params = LocalParams {
        role: Role::Sender,
        transport: TransportPref::Rdma,
        caps: Caps::RDMA.union(Caps::WRITE_WITH_IMM),
        chunk_size: 1 << 20,
        slots: 2,
        integrity: Integrity::Mac,
        rate_limit: None,
        compress: rdpipe_wire::Compress::None,
    };
    let n = handshake(&mut s, key.as_bytes(), &params, Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    if n.chosen != Chosen::Rdma {
        return Err("the receiver did not choose RDMA".into());
    }
    let rport = match read_control(&mut s, &n.peer_addr).map_err(|e| e.to_string())? {
        Control::RdmaOffer { port, .. } => port,
        other => return Err(format!("expected an RdmaOffer, got {other:?}")),
    };
    let local = s
        .local_addr()
        .map_err(|e| e.to_string())?
        .ip()
        .to_canonical();
    let remote = SocketAddr::new(
        s.peer_addr()
            .map_err(|e| e.to_string())?
            .ip()
            .to_canonical(),
        rport,
    );
    let verdict = (|| -> Result<String, String> {
        let e = |e: rdpipe_verbs::VerbsError| e.to_string();
        let ec = EventChannel::new().map_err(e)?;
        let id = ec.create_id().map_err(e)?;
        let wait = |want: CmEventKind| -> Result<rdpipe_verbs::CmEvent, String> {
            match ec.get_event(Some(Duration::from_secs(10))).map_err(e)? {
                Some(ev) if ev.kind == want => Ok(ev),
                Some(ev) => Err(format!("{want:?} expected, got {:?}", ev.kind)),
                None => Err(format!("timed out waiting for {want:?}")),
            }
        };
        id.resolve_addr(
            Some(SocketAddr::new(local, 0)),
            remote,
            Duration::from_secs(5),
        )
        .map_err(e)?;
        wait(CmEventKind::AddrResolved)?;
        id.resolve_route(Duration::from_secs(5)).map_err(e)?;
        wait(CmEventKind::RouteResolved)?;
        let pd = ProtectionDomain::new(&id).map_err(e)?;
        let chan = CompletionChannel::new(&id).map_err(e)?;
        let cq = CompletionQueue::new(&id, &chan, 16).map_err(e)?;
        let _qp = QueuePair::new(
            &id,
            &pd,
            &cq,
            QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
            },
        )
        .map_err(e)?;
        let mut wrong = [0x5au8; RDMA_TOKEN_LEN + 1];
        wrong[RDMA_TOKEN_LEN] = 1;
        id.connect(&wrong).map_err(e)?;
        match ec.get_event(Some(Duration::from_secs(10))).map_err(e)? {
            Some(ev) if ev.kind == CmEventKind::Rejected => Ok(format!(
                "wrong token rejected (private data in the reject: {} bytes)",
                ev.private_data.iter().filter(|b| **b != 0).count()
            )),
            Some(ev) if ev.kind == CmEventKind::Established => Err(format!(
                "wrong token ACCEPTED ({} bytes of private data revealed)",
                ev.private_data.len()
            )),
            Some(ev) => Err(format!(
                "unexpected answer {:?} (status {})",
                ev.kind, ev.status
            )),
            None => Err("no answer to the connect request".into()),
        }
    })();
    let _ = write_control(
        &mut s,
        &n.peer_addr,
        &Control::RdmaDecline("token probe finished".into()),
    );
    verdict
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, host, port, key] = &args[..] else {
        eprintln!("usage: rdma_token_probe HOST PORT KEY");
        return ExitCode::from(2);
    };
    let Ok(port) = port.parse() else {
        eprintln!("bad port {port}");
        return ExitCode::from(2);
    };
    match run(host, port, key) {
        Ok(m) => {
            println!("PROBE: {m}");
            ExitCode::SUCCESS
        }
        Err(m) => {
            println!("PROBE FAILED: {m}");
            ExitCode::from(1)
        }
    }
}
