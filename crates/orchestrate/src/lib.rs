//! rdpipe's conductor: from a plan to a verdict.
//!
//! - [`run`]: the run's event loop: hosts prepared and agents started through
//!   a launcher ([`rdpipe_launch`]), their `PORT` announcements relayed as
//!   `CONNECT` orders, rdpipe's own stdin and stdout ends, the progress line,
//!   teardown and the verdict;
//! - [`doctor`]: `rdpipe doctor HOST...`, which probes hosts and runs test
//!   transfers through [`run`].
//!
//! Below it: [`rdpipe_plan`] (arguments to a plan), [`rdpipe_launch`] (ssh,
//! srun, local, self-install), [`rdpipe_agent`] (what runs on every host),
//! [`rdpipe_control`] (the line protocol between them) and [`rdpipe_report`]
//! (the `--json` reports).
#![deny(missing_docs)]

pub mod doctor;
pub mod run;
