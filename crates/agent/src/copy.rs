//! rdcp's two sides in an agent: `--pack PATH...` sends the paths as an
//! entry stream (`rdpipe_copy::pack`, on a thread writing into a pipe that the
//! outgoing transfer reads), `--unpack DEST` makes the incoming transfer's
//! output an `rdpipe_copy::Unpacker`. The transfer carries the stream like
//! any other, protected and verified the same way; the unpacker's per-file
//! verdict reaches rdcp as the incoming transfer's output error.

use super::segment::Segment;
use super::transfers::Transfers;
use rdpipe_control::{CopyCounts, Direction, Part};
use rdpipe_copy::pack::handoff::{handoff, Handoff};
use rdpipe_copy::pack::pack_mirror_to;
use rdpipe_copy::{list, list_mirror, private, Dest, Manifest, PackOptions, Unpacker};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Where a side's counts go for the segment's `COPIED` line.
type Slot = Arc<Mutex<Option<CopyCounts>>>;

fn record(slot: &Slot, c: CopyCounts) {
    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
}

/// The unpacker as the incoming transfer's output, recording its counts when
/// the stream ends (verified or not).
struct Counted {
    u: Unpacker,
    slot: Slot,
    recorded: bool,
}

impl Counted {
    fn record(&mut self) {
        let s = self.u.stats();
        if s.setid_dropped > 0 {
            tracing::warn!(
                "{}: dropped the set-uid/set-gid bits of {} file{} (--no-setid)",
                self.u.label(),
                s.setid_dropped,
                if s.setid_dropped == 1 { "" } else { "s" }
            );
        }
        record(
            &self.slot,
            CopyCounts::Unpack {
                created: s.created,
                bytes: s.bytes,
                failed: s.failed + s.not_deleted,
                changed: s.changed,
                deleted: s.deleted,
            },
        );
        self.recorded = true;
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.u.write(buf)
    }

    /// The transfer's end: the unpacker's verdict, then the counts.
    fn flush(&mut self) -> io::Result<()> {
        let r = self.u.flush();
        self.record();
        r
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if !self.recorded {
            self.record();
        }
    }
}

/// `~`, `~/x`, `~user` and `~user/x` as scp expands them on the remote
/// side: `~` is this host's HOME (the login user's), `~user` that user's
/// home directory from the passwd database; other paths are unchanged.
fn home_path(p: &str) -> Result<String, String> {
    expand_tilde(p, std::env::var_os("HOME").as_deref(), user_home)
}

/// [`home_path`] with the HOME and the passwd look-up given.
fn expand_tilde(
    p: &str,
    home: Option<&std::ffi::OsStr>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let Some(rest) = p.strip_prefix('~') else {
        return Ok(p.to_string());
    };
    let (user, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let dir = if user.is_empty() {
        match home {
            Some(h) => h.to_string_lossy().into_owned(),
            None => return Ok(p.to_string()),
        }
    } else {
        lookup(user).ok_or_else(|| format!("{p}: no user {user} on this host"))?
    };
    let joined = format!("{}{tail}", dir.trim_end_matches('/'));
    Ok(if joined.is_empty() {
        "/".into()
    } else {
        joined
    })
}

/// `user`'s home directory: /etc/passwd's line, else `getent passwd`'s (for
/// users of a directory service). No shell is involved.
fn user_home(user: &str) -> Option<String> {
    let home_in = |text: &str| {
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 7 && f[0] == user).then(|| f[5].to_string())
        })
    };
    if let Some(h) = std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|t| home_in(&t))
    {
        return Some(h);
    }
    let out = std::process::Command::new("getent")
        .args(["passwd", "--", user])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| home_in(&String::from_utf8_lossy(&out.stdout)))
        .flatten()
}

/// The paths the sources of a copy name on this host: `~` expanded, and
/// with `glob` (remote operands, as scp has them) each pattern's matches
/// ([`rdpipe_copy::glob`]), in byte order; a pattern that matches nothing
/// is an error naming it.
fn source_paths(sources: &[String], glob: bool) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for s in sources {
        if !(glob && rdpipe_copy::glob::is_pattern(s)) {
            out.push(PathBuf::from(home_path(s)?));
            continue;
        }
        // The home directory `~` or `~USER` stands for is a name, not a
        // pattern.
        let (home, rest) = match s.find('/') {
            Some(i) if s.starts_with('~') => s.split_at(i),
            _ if s.starts_with('~') => (s.as_str(), ""),
            _ => ("", s.as_str()),
        };
        let home = match home {
            "" => String::new(),
            h => rdpipe_copy::glob::escape(&home_path(h)?),
        };
        let matches = rdpipe_copy::glob::expand(&format!("{home}{rest}"))
            .map_err(|e| e.for_pattern(s).to_string())?;
        out.extend(matches);
    }
    Ok(out)
}

/// Starts the outgoing transfer from a pipe that `produce` writes on a
/// thread of its own (discarding an incoming stream, if any).
fn send_produced(
    seg: &mut Segment,
    t: &mut Transfers,
    produce: impl FnOnce(&mut BufWriter<File>) + Send + 'static,
) {
    discard_incoming(seg, t);
    if !seg.pending(Direction::Out) {
        return;
    }
    let (r, w) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            seg.drop_transfer(Direction::Out);
            seg.setup_failed(Part::Agent, format!("cannot make a pipe: {e}"));
            return;
        }
    };
    // A larger pipe: fewer wake-ups between the reader and the sender.
    let _ = rustix::pipe::fcntl_setpipe_size(&w, 1 << 20);
    std::thread::spawn(move || produce(&mut BufWriter::with_capacity(1 << 20, File::from(w))));
    t.spawn_send(File::from(r));
}

/// An incoming stream, if any, is read and discarded.
fn discard_incoming(seg: &mut Segment, t: &mut Transfers) {
    if seg.pending(Direction::In) {
        t.spawn_recv(
            Box::new(|| Ok(Box::new(io::sink()) as Box<dyn Write + Send>)),
            None,
        );
    }
}

/// Starts the outgoing transfer from the packer `produce` runs on a thread
/// of its own, handing big files to the transfer's thread
/// ([`rdpipe_copy::pack::handoff`]: no pipe between them).
fn send_packed(
    seg: &mut Segment,
    t: &mut Transfers,
    produce: impl FnOnce(&mut Handoff) + Send + 'static,
) {
    discard_incoming(seg, t);
    if !seg.pending(Direction::Out) {
        return;
    }
    let (mut out, input) = match handoff() {
        Ok(p) => p,
        Err(e) => {
            seg.drop_transfer(Direction::Out);
            seg.setup_failed(Part::Agent, format!("cannot make an eventfd: {e}"));
            return;
        }
    };
    std::thread::spawn(move || produce(&mut out));
    t.spawn_send(input);
}

/// A copy's sources as the agent was given them.
pub struct Sources<'a> {
    /// The paths.
    pub paths: &'a [String],
    /// Whether their wildcards are this host's to expand (remote operands).
    pub glob: bool,
}

/// Starts the source side of a copy (with `sources.glob`, the sources'
/// wildcards expanded first); with `manifest` (`--resume`), what the
/// destination listed as complete is not sent (and, unless `quiet`, one line
/// says how much).
pub fn start_pack(
    sources: Sources,
    opts: PackOptions,
    manifest: Option<&str>,
    mirror: Option<rdpipe_copy::mirror::Mirror>,
    quiet: bool,
    seg: &mut Segment,
    t: &mut Transfers,
) {
    let manifest = match manifest.map(|run| {
        let dir = private::open(run)
            .map_err(|e| format!("cannot open the destination's listing: {e}"))?;
        let m = dir.join(LISTING);
        let r = match opts.stripe {
            // Every stream reads it; the last one removes it, and then the
            // directory goes (it fails while another stream's file is there).
            Some(s) => {
                let r = Manifest::read_shared(&m, s.count);
                let _ = std::fs::remove_dir(&dir);
                r
            }
            None => {
                let r = Manifest::read(&m);
                let _ = private::remove(run);
                r
            }
        };
        r.map_err(|e| format!("cannot read the destination's listing {}: {e}", m.display()))
    }) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(msg)) => {
            seg.setup_failed(Part::File, msg);
            return;
        }
    };
    let sources = match source_paths(sources.paths, sources.glob) {
        Ok(s) => s,
        Err(msg) => {
            seg.setup_failed(Part::File, msg);
            return;
        }
    };
    let slot = seg.copied.clone();
    send_packed(seg, t, move |out| {
        match pack_mirror_to(&sources, opts, manifest.as_ref(), mirror, out) {
            Ok(s) => {
                record(
                    &slot,
                    CopyCounts::Pack {
                        sent: s.entries,
                        bytes: s.bytes,
                        unreadable: s.failed,
                        changed: s.changed,
                        skipped: s.skipped,
                        resumed: s.resumed,
                        skipped_bytes: s.skipped_bytes,
                    },
                );
                tracing::debug!(
                    "packed {} entries, {} bytes of data; {} failed, {} changed",
                    s.entries,
                    s.bytes,
                    s.failed,
                    s.changed
                );
                if manifest.is_some() && opts.stripe.is_none_or(|s| s.index == 0) && !quiet {
                    rdpipe_term::say(
                        "rdcp",
                        format_args!(
                            "resume: {} files complete at the destination, {} continued from a \
                             partial copy; {} bytes not sent again",
                            s.skipped, s.resumed, s.skipped_bytes
                        ),
                    );
                }
            }
            // The transfer went away (its own failure is reported).
            Err(e) => tracing::debug!("packing stopped: {e}"),
        }
    });
}

/// The listing's name in its copy's private directory.
const LISTING: &str = "listing";

/// Starts `rdcp --resume`'s second half of the listing step on the sources'
/// host: makes copy `run`'s private directory and saves the incoming
/// listing there (published once verified, as any `> FILE`).
pub fn start_save_listing(run: &str, seg: &mut Segment, t: &mut Transfers) {
    match private::create(run) {
        Ok(dir) => {
            let path = dir.join(LISTING).to_string_lossy().into_owned();
            super::file::start_write(&path, false, false, seg, t);
        }
        Err(e) => {
            if seg.pending(Direction::In) {
                seg.drop_transfer(Direction::In);
            }
            seg.setup_failed(
                Part::File,
                format!("cannot make a private directory for the listing: {e}"),
            );
        }
    }
}

/// Starts `rdcp --resume`'s listing of `dest` (for sources named `tops`;
/// with each file's content hash for `--checksum`; for `mirror`, `rdcp
/// --delete`, of `dest` as the one source's copy).
pub fn start_list(
    dest: &str,
    must_be_dir: bool,
    tops: &[String],
    checksum: bool,
    mirror: bool,
    seg: &mut Segment,
    t: &mut Transfers,
) {
    let dest = match home_path(dest) {
        Ok(d) => PathBuf::from(d),
        Err(msg) => {
            seg.setup_failed(Part::File, msg);
            return;
        }
    };
    let tops: Vec<Vec<u8>> = tops.iter().map(|s| s.as_bytes().to_vec()).collect();
    send_produced(seg, t, move |out| {
        let r = if mirror {
            list_mirror(&dest, checksum, out)
        } else {
            list(&dest, must_be_dir, &tops, checksum, out)
        };
        if let Err(e) = r {
            tracing::debug!("listing stopped: {e}");
        }
    });
}

/// Starts the destination side of a copy into `dest`, with `a`'s
/// `--must-be-dir`, `--preserve`, `--specials`, `--direct` and `--top` (the
/// one source's name of a resumed copy).
pub fn start_unpack(dest: &str, a: &super::AgentArgs, seg: &mut Segment, t: &mut Transfers) {
    let (must_be_dir, preserve, specials, direct, stripe) =
        (a.must_be_dir, a.preserve, a.specials, a.direct, a.stripe);
    let no_setid = a.no_setid;
    let resumed_top = a.top.first().map(String::as_str);
    let dest = match home_path(dest) {
        Ok(d) => d,
        Err(msg) => {
            if seg.pending(Direction::In) {
                seg.drop_transfer(Direction::In);
            }
            seg.setup_failed(Part::File, msg);
            super::file::send_empty(seg, t);
            return;
        }
    };
    seg.file_target = Some(dest.clone());
    let top = resumed_top.map(str::as_bytes);
    let path = std::path::Path::new(&dest);
    let mirror = a.mirror;
    let opened = match (mirror, stripe) {
        (Some(m), _) => Dest::mirror(path, &m)
            .map(|d| (d, None))
            .map_err(|e| e.to_string()),
        (None, Some(s)) => Dest::open_stream(path, must_be_dir, top, &s).map_err(|e| e.to_string()),
        (None, None) => Dest::open(path, must_be_dir, top)
            .map(|d| (d, None))
            .map_err(|e| e.to_string()),
    };
    let host = mirror_host(&a.label);
    match opened {
        Ok((d, marker)) if seg.pending(Direction::In) => {
            let label = dest.clone();
            let slot = seg.copied.clone();
            t.spawn_recv(
                Box::new(move || {
                    let mut u = Unpacker::new(d, &label, preserve)
                        .with_no_setid(no_setid)
                        .with_specials(specials)
                        .with_direct(direct);
                    if let Some(s) = stripe {
                        u = u.with_stripe(s, marker);
                    }
                    if let Some(m) = mirror {
                        u = u.with_mirror(m, host);
                    }
                    let u = Counted {
                        u,
                        slot,
                        recorded: false,
                    };
                    Ok(Box::new(u) as Box<dyn Write + Send>)
                }),
                None,
            )
        }
        Ok(_) => seg.setup_failed(Part::File, format!("{dest}: no rdcp stream comes to it")),
        Err(msg) => {
            if seg.pending(Direction::In) {
                seg.drop_transfer(Direction::In);
            }
            seg.setup_failed(Part::File, msg);
        }
    }
    super::file::send_empty(seg, t);
}

/// `HOST:` for the mirror's message lines, from the agent's label
/// (`HOST[N]`); empty on the machine rdcp runs on (`local[N]`).
fn mirror_host(label: &str) -> String {
    let host = match label.rsplit_once('[') {
        Some((h, n))
            if n.strip_suffix(']')
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            h
        }
        _ => label,
    };
    if host == "local" || host.is_empty() {
        String::new()
    } else {
        format!("{host}:")
    }
}

#[cfg(test)]
mod tests {
    use super::{expand_tilde, mirror_host};

    #[test]
    fn mirror_lines_name_the_host() {
        assert_eq!(mirror_host("h1[2]"), "h1:");
        assert_eq!(mirror_host("[u@h:22][2]"), "[u@h:22]:");
        assert_eq!(mirror_host("local[2]"), "");
        assert_eq!(mirror_host("agent"), "agent:");
    }
    use std::ffi::OsStr;

    #[test]
    fn tilde_as_scp() {
        let users = |u: &str| (u == "ann").then(|| "/home/ann".to_string());
        let e = |p: &str| expand_tilde(p, Some(OsStr::new("/h/me")), users);
        assert_eq!(e("~").unwrap(), "/h/me");
        assert_eq!(e("~/").unwrap(), "/h/me/");
        assert_eq!(e("~/a/b").unwrap(), "/h/me/a/b");
        assert_eq!(e("~ann").unwrap(), "/home/ann");
        assert_eq!(e("~ann/").unwrap(), "/home/ann/");
        assert_eq!(e("~ann/x").unwrap(), "/home/ann/x");
        assert_eq!(e("/a/~ann").unwrap(), "/a/~ann");
        assert_eq!(e("a~").unwrap(), "a~");
        assert_eq!(e("~bob/x").unwrap_err(), "~bob/x: no user bob on this host");
        assert_eq!(expand_tilde("~", None, users).unwrap(), "~");
        let root = |_: &str| Some("/".to_string());
        assert_eq!(expand_tilde("~r", None, root).unwrap(), "/");
        assert_eq!(expand_tilde("~r/x", None, root).unwrap(), "/x");
    }
}
