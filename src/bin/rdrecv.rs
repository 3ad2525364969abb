//! `rdrecv PORT KEY [FILE]`: see `rdrecv --help` and man/rdrecv.1.

use clap::Parser;
use rdma_pipe::cli::recv::{run, RecvArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    match run(RecvArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            rdma_pipe::cli::common::say("rdrecv", &f.message);
            ExitCode::from(f.code)
        }
    }
}
