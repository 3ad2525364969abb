//! The command-line side of rdma-pipe: flag definitions (clap derive) and the
//! `run` functions the three binaries call. The binaries themselves only parse
//! flags and map the result to an exit status; logic lives in the `crates/`.
//!
//! The clap definitions live here, not in `src/bin/`, so that man pages and shell
//! completions are generated from exactly what `--help` shows.
#![deny(missing_docs)]

pub mod cli;
