//! rdpipe orchestration (pipeline plan, SSH launch). Work in progress.
#![deny(missing_docs)]
