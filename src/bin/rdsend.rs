//! `rdsend`: see `rdsend --help` and man/rdsend.1. Parses flags and hands over to
//! [`rdma_pipe::cli::send::run`]; this file only maps the outcome to an exit status.

use clap::Parser;
use rdma_pipe::cli::send::{run, SendArgs};
use rdma_pipe::cli::term;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = SendArgs::parse();
    term::init_logging("rdsend", args.common.verbose, args.common.quiet);
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            term::error("rdsend", &f.message);
            ExitCode::from(f.code)
        }
    }
}
