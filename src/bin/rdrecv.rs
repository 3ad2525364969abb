//! `rdrecv PORT KEY [FILE]`: see `rdrecv --help` and man/rdrecv.1.

use clap::Parser;
use rdma_pipe::cli::recv::{run, RecvArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    // `rdrecv --agent ...`: rdpipe's per-segment endpoint, started over SSH.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if argv.first().is_some_and(|a| a == "--agent") {
        return rdpipe_orchestrate::agent::main(argv[1..].iter().cloned());
    }
    match run(RecvArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            rdma_pipe::cli::common::say("rdrecv", &f.message);
            ExitCode::from(f.code)
        }
    }
}
