//! `rdrecv PORT KEY [FILE]`: see `rdrecv --help` and man/rdrecv.1.

use clap::Parser;
use rdma_pipe::cli::recv::{run, RecvArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    // `rdrecv --agent ...`: rdpipe's per-segment endpoint, started over SSH (and
    // its `--cmd-guard` helper).
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(code) = rdpipe_orchestrate::internal_mode(&argv) {
        return code;
    }
    match run(RecvArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            rdma_pipe::cli::common::say("rdrecv", &f.message);
            ExitCode::from(f.code)
        }
    }
}
