//! Paths on this host as rdpipe's users write them: `~/x` is in the home
//! directory (`> FILE`, `--spool SIZE:DIR`; rdcp's operands expand their
//! own forms).

/// `~/x` → `$HOME/x` (the home directory on this host).
pub fn expand_home(p: &str, home: Option<&std::ffi::OsStr>) -> String {
    match (p.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => format!("{}/{rest}", h.to_string_lossy()),
        _ => p.to_string(),
    }
}
