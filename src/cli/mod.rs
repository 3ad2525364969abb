//! Flags and entry points of `rdsend`, `rdrecv` and `rdpipe`, and what they share: key
//! resolution, size parsing, messages and exit statuses.

pub mod common;
pub mod docs;
pub mod pipe;
pub mod progress;
pub mod recv;
pub mod send;
pub mod term;

pub use common::{fail, Failure};
