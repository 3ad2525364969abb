//! `rdrecv`: see `rdrecv --help` and man/rdrecv.1. Parses flags and hands over to
//! [`rdma_pipe::cli::recv::run`]; [`rdma_pipe::cli::finish`]
//! prints the error and maps the outcome to the exit status.

use clap::Parser;
use rdma_pipe::cli::recv::{run, RecvArgs};
use rdma_pipe::cli::{finish, term};
use std::process::ExitCode;

fn main() -> ExitCode {
    // `rdrecv --agent ...`: rdpipe's per-segment endpoint, started over SSH (and
    // its `--cmd-guard` helper).
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(code) = rdpipe_agent::internal_mode(&argv) {
        return code;
    }
    let args = RecvArgs::parse();
    term::init_logging("rdrecv", args.common.verbose, args.common.quiet);
    finish("rdrecv", run(args))
}
