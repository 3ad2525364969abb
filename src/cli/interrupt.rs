//! SIGINT, SIGTERM and SIGHUP for rdsend and rdrecv: the process exits at once
//! with 128 + the signal's number, as a shell's pipeline member would, but
//! first undoes its unpublished output file (rdrecv's FILE keeps its old
//! content; see `rdpipe_transport::output`), writes its `--json` report, and
//! prints one line saying why. (rdpipe has its own teardown: it stops every
//! host's segments.)

use super::common::{print_failure, Failure};
use rdpipe_report::Role;
use std::path::PathBuf;
use std::time::Instant;

/// What the handler needs to report the interrupted run.
pub struct Interrupted {
    /// `rdsend` or `rdrecv`.
    pub tool: &'static str,
    /// Its role, for the report.
    pub role: Role,
    /// `--json FILE`.
    pub json: Option<PathBuf>,
    /// The peer as asked for (rdsend's HOST:PORT).
    pub peer: Option<String>,
    /// When the run started.
    pub start: Instant,
}

fn name(sig: i32) -> &'static str {
    match sig {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        signal_hook::consts::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Watches for SIGINT, SIGTERM and SIGHUP (those not inherited as ignored)
/// on a thread of its own for the rest of the process's life (see the module
/// doc).
pub fn watch(on: Interrupted) {
    // Less those inherited as ignored (`nohup`, a background job): see
    // `stop_signals`.
    let sigs = signal_hook::iterator::Signals::new(rdpipe_agent::guard::stop_signals());
    let Ok(mut sigs) = sigs else {
        // Without the watcher the default action (exit) still stops the run.
        return;
    };
    std::thread::spawn(move || {
        if let Some(sig) = sigs.forever().next() {
            rdpipe_transport::output::undo_pending();
            let f = Failure {
                messages: vec![format!("interrupted by {}", name(sig))],
                code: 128 + sig as u8,
            };
            let code = f.code;
            let f = super::report_json::finish(
                on.json.as_deref(),
                on.tool,
                on.role,
                on.peer,
                on.start,
                Err(f),
            )
            .err()
            .unwrap_or(Failure {
                messages: vec![],
                code,
            });
            print_failure(on.tool, &f);
            std::process::exit(i32::from(f.code));
        }
    });
}
