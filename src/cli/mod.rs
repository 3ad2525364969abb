//! Flags and entry points of `rdsend`, `rdrecv` and `rdpipe`, and what they share: key
//! resolution, size parsing, messages and exit statuses.

pub mod common;
pub mod cp;
pub mod cp_streams;
pub mod docs;
pub mod doctor;
pub mod forward;
pub mod interrupt;
pub mod pipe;
pub mod recv;
pub mod report_json;
pub mod run_opts;
pub mod send;

pub use common::{fail, finish, Failure};
/// Messages, logging and the progress line (the `rdpipe-term` crate).
pub use rdpipe_term as term;
pub use rdpipe_term::progress;
