//! `RDPIPE_KEYLOG=FILE`: rdpipe appends every key it makes for the run (each
//! hop's, the chain secret, each re-link hop's) to FILE, one `WHAT HEX` a
//! line, as TLS libraries do with `SSLKEYLOGFILE`. It exists so that a test
//! can check that no key crosses a channel it taps (tests/integration/srun.rs);
//! it reveals nothing its user does not already hold (the keys are the run's
//! own, made by this process), and it is loud: rdpipe warns on stderr that it
//! writes keys. FILE is created owner-only (0600), never through a symbolic
//! link, and the variable is not passed to srun's job steps. Agents never
//! read it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// The variable.
pub const KEYLOG_ENV: &str = "RDPIPE_KEYLOG";

/// Appends `what HEX(key)` to the key log, when `RDPIPE_KEYLOG` names one.
pub fn record(what: &str, key: &[u8]) {
    let Some(path) = std::env::var_os(KEYLOG_ENV).filter(|p| !p.is_empty()) else {
        return;
    };
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::SeqCst) {
        tracing::warn!(
            "{KEYLOG_ENV} is set: this run's keys are written to {} (for tests only; unset it)",
            std::path::Path::new(&path).display()
        );
    }
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path);
    let line = format!("{what} {}\n", crate::encode_hex(key));
    if let Err(e) = f.and_then(|mut f| f.write_all(line.as_bytes())) {
        tracing::warn!(
            "{KEYLOG_ENV}: cannot write {}: {e}",
            std::path::Path::new(&path).display()
        );
    }
}
