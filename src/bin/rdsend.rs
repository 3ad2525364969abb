//! `rdsend HOST PORT KEY [FILE]`: see `rdsend --help` and man/rdsend.1.

use clap::Parser;
use rdma_pipe::cli::send::{run, SendArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run(SendArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            rdma_pipe::cli::common::say("rdsend", &f.message);
            ExitCode::from(f.code)
        }
    }
}
