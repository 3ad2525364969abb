//! The integration tests, one crate (as ripgrep does): every module drives the
//! real binaries and asserts real outcomes (bytes, exit codes, processes gone).
//! `support/` holds the shared helpers. The Soft-RoCE VM suite is a separate
//! test binary (`tests/rdma_vm.rs`): cargo runs test binaries one after
//! another, so its guest, which keeps a core busy for minutes, never runs beside
//! the time-bounded fault tests here.
//!
//! Run one module with `cargo test --release --test integration MODULE::`.
//! Tests that cannot run here (no root, no sshd) print a `SKIPPED` line past
//! the output capture; with `RDPIPE_REQUIRE_ALL=1` they fail instead.

mod support;

mod attacks;
mod attacks_local;
mod compress;
mod discovery;
mod docs;
mod doctor;
mod endpoints;
mod fanout;
mod faults_endpoints;
mod faults_network;
mod faults_pipeline;
mod file_io;
mod forward;
mod gather;
mod json_report;
mod listen_attacks;
mod no_rdma_core;
mod rate_limit;
mod rdcp;
mod rdcp_delete;
mod rdcp_glob;
mod rdcp_scp;
mod rdcp_streams;
mod rdpipe_install;
mod rdpipe_local;
mod rdpipe_messages;
mod rdpipe_netns;
mod rdpipe_ssh;
mod readme;
mod reattach;
mod reconnect;
mod relay_only;
mod relink;
mod slurm;
mod srun;
