//! `rdpipe`: Unix pipes between machines, orchestrated over SSH. See
//! `rdpipe --help`, `rdma_pipe::cli::pipe` and the `rdpipe-orchestrate` crate.
//! Parses flags, calls [`rdma_pipe::cli::pipe::run`], and ends through
//! [`rdma_pipe::cli::finish`], the one place that prints the error.

use clap::Parser;
use rdma_pipe::cli::doctor::{self, DoctorArgs};
use rdma_pipe::cli::forward::{self, ForwardArgs};
use rdma_pipe::cli::pipe::{normalize_args, run, PipeArgs};
use rdma_pipe::cli::{fail, finish, term};
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    // Internal modes: the endpoint agent of local segments, the ssh master guard.
    if let Some(code) = rdpipe_agent::internal_mode(&argv) {
        return code;
    }
    // `rdpipe doctor HOST...` (a segment always has a ':', so no pipeline starts so).
    if doctor::wanted(&argv) {
        let args = match DoctorArgs::try_parse_from(&argv) {
            Ok(a) => a,
            Err(e) => {
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
            }
        };
        term::init_logging("rdpipe", 0, false);
        let outcome = std::env::current_exe()
            .map_err(|e| fail(1, format!("cannot find my own executable: {e}")))
            .and_then(|exe| doctor::run(args, exe));
        return finish("rdpipe", outcome);
    }
    // `rdpipe forward [LISTEN_HOST:]PORT TARGET_HOST:ADDR:PORT`.
    if forward::wanted(&argv) {
        let args = match ForwardArgs::try_parse_from(normalize_args(argv)) {
            Ok(a) => a,
            Err(e) => {
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
            }
        };
        term::init_logging("rdpipe", args.run.verbosity(), args.run.quiet);
        let outcome = std::env::current_exe()
            .map_err(|e| fail(1, format!("cannot find my own executable: {e}")))
            .and_then(|exe| forward::run(args, exe));
        return finish("rdpipe", outcome);
    }
    let args = match PipeArgs::try_parse_from(normalize_args(std::env::args_os())) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    term::init_logging("rdpipe", args.verbosity(), args.run.quiet);
    let outcome = std::env::current_exe()
        .map_err(|e| fail(1, format!("cannot find my own executable: {e}")))
        .and_then(|exe| run(args, exe));
    finish("rdpipe", outcome)
}
