//! `rdrecv`: see `rdrecv --help` and man/rdrecv.1. Parses flags and hands over to
//! [`rdma_pipe::cli::recv::run`]; this file only maps the outcome to an exit status.

use clap::Parser;
use rdma_pipe::cli::recv::{run, RecvArgs};
use rdma_pipe::cli::term;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `rdrecv --agent ...`: rdpipe's per-segment endpoint, started over SSH (and
    // its `--cmd-guard` helper).
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(code) = rdpipe_orchestrate::internal_mode(&argv) {
        return code;
    }
    let args = RecvArgs::parse();
    term::init_logging("rdrecv", args.common.verbose, args.common.quiet);
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            term::error("rdrecv", &f.message);
            ExitCode::from(f.code)
        }
    }
}
