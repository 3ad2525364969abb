//! `rdsend`: see `rdsend --help` and man/rdsend.1. Parses flags and hands over to
//! [`rdma_pipe::cli::send::run`]; [`rdma_pipe::cli::finish`]
//! prints the error and maps the outcome to the exit status.

use clap::Parser;
use rdma_pipe::cli::send::{run, SendArgs};
use rdma_pipe::cli::{finish, term};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = SendArgs::parse();
    term::init_logging("rdsend", args.common.verbose, args.common.quiet);
    finish("rdsend", run(args))
}
