//! `rdpipe`: Unix pipes between machines, orchestrated over SSH. See
//! `rdpipe --help`, `rdma_pipe::cli::pipe` and the `rdpipe-orchestrate` crate.

use clap::Parser;
use rdma_pipe::cli::pipe::{normalize_args, run, PipeArgs};
use rdma_pipe::cli::term;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Internal modes: the endpoint agent of local segments, the ssh master guard.
    if let Some(code) = rdpipe_orchestrate::internal_mode(&argv) {
        return code;
    }
    let args = match PipeArgs::try_parse_from(normalize_args(std::env::args_os())) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    term::init_logging("rdpipe", args.verbosity(), args.quiet);
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            term::error("rdpipe", format!("cannot find my own executable: {e}"));
            return ExitCode::from(1);
        }
    };
    ExitCode::from(run(args, exe))
}
