//! What rdsend, rdrecv and rdpipe print on stderr, and how.
//!
//! - Messages: one line each, prefixed with the tool's name (bold), `error:` in red
//!   and `warning:` in yellow, coloured only when stderr is a terminal and
//!   `NO_COLOR` is unset (<https://no-color.org>): [`say`], [`error`], [`warn`].
//! - The `tracing` subscriber behind `-vv` / `-vvv` / `RUST_LOG`, printing the same
//!   way: [`init_logging`].
//! - The live progress line ([`progress`]), which stays at the bottom of a
//!   terminal: every line written through [`line`] (messages, log events, a
//!   pipeline's forwarded stderr) first clears it and then draws it again, so the
//!   output stays readable. Nothing here writes escape sequences other than the
//!   colours: the progress line is redrawn with `\r` and blanks.
//! - Text from elsewhere (file names, remote stderr, a peer's words) never
//!   reaches the terminal raw: [`say`], [`error`], [`warn`], the log
//!   subscriber and [`forwarded`] escape its control characters ([`escape`]).
#![deny(missing_docs)]

pub mod escape;
pub mod progress;

pub use escape::{escaped, escaped_bytes};

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, OnceLock};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Whether stderr is a terminal (asked once).
pub fn stderr_is_terminal() -> bool {
    static TTY: OnceLock<bool> = OnceLock::new();
    *TTY.get_or_init(|| std::io::stderr().is_terminal())
}

/// Whether stderr gets colours.
pub fn color() -> bool {
    color_allowed(
        std::env::var_os("NO_COLOR").as_deref(),
        stderr_is_terminal(),
    )
}

/// The colour rule: a terminal, and `NO_COLOR` unset or empty.
fn color_allowed(no_color: Option<&std::ffi::OsStr>, is_terminal: bool) -> bool {
    no_color.is_none_or(|v| v.is_empty()) && is_terminal
}

/// `text` in the SGR colour `code` (`1` bold, `31` red, `33` yellow) where colours
/// are allowed, else as it is.
pub fn paint(code: &str, text: &str) -> String {
    paint_if(color(), code, text)
}

/// [`paint`] with the decision given.
fn paint_if(color: bool, code: &str, text: &str) -> String {
    if color {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// The progress line currently drawn on the terminal, if any.
struct Status {
    line: Option<String>,
    /// Characters the terminal shows of the last line drawn (for blanking it).
    width: usize,
}

static STATUS: Mutex<Status> = Mutex::new(Status {
    line: None,
    width: 0,
});

fn status() -> std::sync::MutexGuard<'static, Status> {
    STATUS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `\r`, blanks over the last line drawn, `\r`.
fn blank(out: &mut Vec<u8>, width: usize) {
    out.push(b'\r');
    out.extend(std::iter::repeat_n(b' ', width));
    out.push(b'\r');
}

/// Writes whole lines with a single `write`, so lines from several tools sharing a
/// terminal never interleave mid-line. A progress line on the terminal is cleared
/// first and drawn again after.
pub fn line_bytes(s: &[u8]) {
    let st = status();
    let mut out = Vec::with_capacity(s.len() + 2 * st.width + 4);
    if st.line.is_some() {
        blank(&mut out, st.width);
    }
    out.extend_from_slice(s);
    if let Some(l) = &st.line {
        if s.ends_with(b"\n") {
            out.extend_from_slice(l.as_bytes());
        }
    }
    let _ = std::io::stderr().lock().write_all(&out);
}

/// [`line_bytes`] for text.
pub fn line(s: &str) {
    line_bytes(s.as_bytes())
}

/// A line from elsewhere (a remote host's stderr) after `prefix`: its control
/// characters escaped, so that it is one line and acts on nothing.
pub fn forwarded(prefix: &str, line: &[u8]) {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line_bytes(format!("{prefix}{}\n", escaped_bytes(line)).as_bytes());
}

/// Draws `l` as the progress line (terminal only): replaces the previous one, and
/// stays below whatever [`line`] prints until [`finish_status`].
pub fn draw_status(l: &str) {
    let mut st = status();
    let width = l.chars().count();
    let mut out = Vec::with_capacity(l.len() + st.width + 2);
    out.push(b'\r');
    out.extend_from_slice(l.as_bytes());
    // Blank what is left of a longer previous line.
    out.extend(std::iter::repeat_n(b' ', st.width.saturating_sub(width)));
    st.line = Some(l.to_string());
    st.width = width;
    let _ = std::io::stderr().lock().write_all(&out);
}

/// Replaces the progress line by `l` as an ordinary line, which stays.
pub fn finish_status(l: &str) {
    let mut st = status();
    let mut out = Vec::new();
    if st.line.take().is_some() {
        blank(&mut out, st.width);
    }
    st.width = 0;
    out.extend_from_slice(l.as_bytes());
    out.push(b'\n');
    let _ = std::io::stderr().lock().write_all(&out);
}

/// `tool:` in bold where colours are allowed.
pub fn prefix(tool: &str) -> String {
    format!("{}:", paint("1", tool))
}

/// `tool: msg` (control characters in `msg` escaped, as in every message).
pub fn say(tool: &str, msg: impl fmt::Display) {
    let msg = msg.to_string();
    line(&format!("{} {}\n", prefix(tool), escaped(&msg)));
}

/// `tool: error: msg` (red where colours are allowed).
pub fn error(tool: &str, msg: impl fmt::Display) {
    let msg = msg.to_string();
    line(&format!(
        "{} {} {}\n",
        prefix(tool),
        paint("31", "error:"),
        escaped(&msg)
    ));
}

/// `tool: warning: msg` (yellow where colours are allowed).
pub fn warn(tool: &str, msg: impl fmt::Display) {
    let msg = msg.to_string();
    line(&format!(
        "{} {} {}\n",
        prefix(tool),
        paint("33", "warning:"),
        escaped(&msg)
    ));
}

struct ToolFormat(String);

impl<S, N> FormatEvent<S, N> for ToolFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        e: &Event<'_>,
    ) -> fmt::Result {
        let level = *e.metadata().level();
        let label = match level {
            Level::ERROR => paint("31", "error:"),
            Level::WARN => paint("33", "warning:"),
            Level::INFO => "info:".to_string(),
            Level::DEBUG => "debug:".to_string(),
            Level::TRACE => "trace:".to_string(),
        };
        // The fields plainly (no colours of the field formatter's own), then
        // escaped: a logged name or peer text must not act on the terminal.
        let mut fields = String::new();
        ctx.field_format()
            .format_fields(Writer::new(&mut fields), e)?;
        writeln!(w, "{} {label} {}", prefix(&self.0), escaped(&fields))
    }
}

/// Log events go through [`line_bytes`], which keeps the progress line intact.
struct LineWriter;

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        line_bytes(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LineWriter {
    type Writer = LineWriter;
    fn make_writer(&'a self) -> LineWriter {
        LineWriter
    }
}

/// The default log filter: warnings, `error` with `-q`, `info` with `-v` (why a
/// transport was chosen), `debug` with `-vv` (connection set-up), `trace` with
/// `-vvv`.
pub fn default_filter(verbose: u8, quiet: bool) -> &'static str {
    match verbose {
        _ if quiet => "error",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    }
}

/// Installs the log subscriber for `tool`: [`default_filter`], unless `RUST_LOG`
/// holds a valid filter.
pub fn init_logging(tool: &str, verbose: u8, quiet: bool) {
    let env = std::env::var("RUST_LOG").ok();
    init_logging_with(tool, verbose, quiet, env.as_deref());
}

/// [`init_logging`] with an explicit filter (`RUST_LOG` syntax) instead of the
/// environment's: what rdpipe hands its remote endpoints.
pub fn init_logging_with(tool: &str, verbose: u8, quiet: bool, filter: Option<&str>) {
    let filter = filter
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(default_filter(verbose, quiet)));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(color())
        .with_writer(LineWriter)
        .event_format(ToolFormat(tool.to_string()))
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_by_verbosity() {
        assert_eq!(default_filter(0, false), "warn");
        assert_eq!(default_filter(1, false), "info");
        assert_eq!(default_filter(2, false), "debug");
        assert_eq!(default_filter(3, false), "trace");
        assert_eq!(default_filter(3, true), "error");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(!color_allowed(None, false));
        assert!(!color_allowed(Some(OsStr::new("1")), false));
        assert!(color_allowed(None, true));
        // NO_COLOR set to anything but empty turns colours off.
        assert!(color_allowed(Some(OsStr::new("")), true));
        assert!(!color_allowed(Some(OsStr::new("1")), true));
        assert!(!color_allowed(Some(OsStr::new("0")), true));
    }

    #[test]
    fn paint_wraps_in_sgr_only_when_allowed() {
        assert_eq!(paint_if(false, "31", "error:"), "error:");
        assert_eq!(paint_if(true, "31", "error:"), "\x1b[31merror:\x1b[0m");
        assert_eq!(paint_if(true, "1", "rdpipe"), "\x1b[1mrdpipe\x1b[0m");
    }
}
