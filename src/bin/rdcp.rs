//! `rdcp`: copy files and trees between hosts. See `rdcp --help`,
//! `rdma_pipe::cli::cp` and the `rdpipe-copy` crate. Parses flags, calls
//! [`rdma_pipe::cli::cp::run`], and ends through [`rdma_pipe::cli::finish`],
//! the one place that prints the error.

use clap::Parser;
use rdma_pipe::cli::cp::{run, CpArgs};
use rdma_pipe::cli::{fail, finish, term};
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Internal modes: the endpoint agent of local segments, the ssh master guard.
    if let Some(code) = rdpipe_agent::internal_mode(&argv) {
        return code;
    }
    let args = match CpArgs::try_parse_from(std::env::args_os()) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    rdpipe_orchestrate::run::set_tool("rdcp");
    term::init_logging("rdcp", args.run.verbosity(), args.run.quiet);
    let outcome = std::env::current_exe()
        .map_err(|e| fail(1, format!("cannot find my own executable: {e}")))
        .and_then(|exe| run(args, exe));
    finish("rdcp", outcome)
}
