//! Messages on stderr: one line each, prefixed with the tool's name, coloured only
//! when stderr is a terminal and `NO_COLOR` is unset (<https://no-color.org>), and
//! the `tracing` subscriber behind `-vv` / `RUST_LOG` that prints the same way.

use std::fmt;
use std::io::{IsTerminal, Write};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Whether stderr gets colours.
pub fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

fn paint(code: &str, text: &str) -> String {
    if color() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// Writes one whole line with a single `write`, so lines from several tools sharing
/// a terminal never interleave mid-line.
pub fn line(s: &str) {
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}

/// `tool: msg`.
pub fn say(tool: &str, msg: impl fmt::Display) {
    line(&format!("{}: {msg}\n", paint("1", tool)));
}

/// `tool: error: msg` (red where colours are allowed).
pub fn error(tool: &str, msg: impl fmt::Display) {
    line(&format!(
        "{}: {} {msg}\n",
        paint("1", tool),
        paint("31", "error:")
    ));
}

/// `tool: warning: msg` (yellow where colours are allowed).
pub fn warn(tool: &str, msg: impl fmt::Display) {
    line(&format!(
        "{}: {} {msg}\n",
        paint("1", tool),
        paint("33", "warning:")
    ));
}

struct ToolFormat(&'static str);

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
        write!(w, "{}: {label} ", paint("1", self.0))?;
        ctx.field_format().format_fields(w.by_ref(), e)?;
        writeln!(w)
    }
}

/// Installs the log subscriber: warnings by default, `-vv` for debug (connection
/// set-up), `-vvv` for trace; `RUST_LOG` overrides both.
pub fn init_logging(tool: &'static str, verbose: u8, quiet: bool) {
    let default = match verbose {
        _ if quiet => "error",
        0 | 1 => "warn",
        2 => "debug",
        _ => "trace",
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(ToolFormat(tool))
        .try_init();
}
