//! `rdcp`'s flags and its plan: the operands, in scp's syntax, become a
//! two-segment pipeline (the sources' host packs, the destination's host
//! unpacks) that the orchestrator runs exactly as it runs rdpipe's; remote to
//! remote goes host to host.

use crate::cli::common::{fail, Failure};
use crate::cli::run_opts::RunOpts;
use clap::Parser;
use rdpipe_orchestrate::run::LocalExe;
use rdpipe_plan::{parse_segment, Action, Host, PlanError, Segment};
use std::path::PathBuf;

/// Examples for `--help` and the man page.
pub const EXAMPLES: &str = "\
Examples:
  # a file to a host, with the bandwidth at the end (the original's example):
  rdcp -v big_file host:/dev/null

  # a tree to a host, and back (-r keeps modes and times, like cp -a):
  rdcp -r dir host:dir
  rdcp -r host:dir dir

  # between two hosts: the data goes from host1 to host2 directly:
  rdcp -r host1:/data/set host2:/scratch/

  # several files into a directory; a user and an IPv6 address:
  rdcp a.img b.img user@[fe80::1%eth0]:/images/

  # a link faster than one core's protection: four transfers side by side:
  rdcp --streams 4 big.img host:/scratch/

  # after an interruption, only what is missing (a file cut short continues):
  rdcp -r --resume dir host:dir

  # check a copy by content and repair what differs:
  rdcp -rc dir host:dir

  # a mirror: host:/backup/dir becomes dir's copy, what dir lacks removed
  # there (-n first lists what would go):
  rdcp -r --delete -n dir host:/backup/dir
  rdcp -rv --delete dir host:/backup/dir

  # into the home directory there, over ssh port 2222 (scp's -P), or as a URI:
  rdcp -P 2222 notes.txt host:~
  rdcp notes.txt scp://user@host:2222//tmp/

  # standard input to a file on a host, and a file to standard output:
  zfs send tank/x@s | rdcp - host:/backup/x.zfs
  rdcp host:/var/log/syslog - | less";

/// rdcp's exit statuses, for the man page.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Every file was copied whole and verified."),
    ("1", "Some files were not copied (one line each names it and why: unreadable, not writable, a symbolic link in the destination's path, changed while read); the others were, each only once verified. Also any other failure: ssh, a transfer, the destination."),
    ("2", "Bad arguments: no destination, a directory without -r, sources on different hosts, --delete without -r or with several sources, - or --streams."),
    ("127", "rdrecv was not found on a host and rdcp could not install itself there."),
    ("130, 143", "Interrupted by SIGINT or SIGTERM; files already renamed into place stay, the one being written stays under its temporary name, for --resume to continue; a later run that writes that file without --resume removes it."),
];

/// Copy files and directory trees between hosts, over RDMA or TCP, set up
/// over SSH.
///
/// Operands as for scp: a local PATH, HOST:PATH, USER@HOST:PATH,
/// [ADDR]:PATH or USER@[ADDR]:PATH (IPv6), [USER@HOST:PORT]:PATH,
/// scp://[USER@]HOST[:PORT][/PATH] (PATH relative to the home directory as
/// OpenSSH's scp reads it, //PATH absolute, %XX decoded; without one, the
/// home directory; [ADDR] for IPv6), or - (standard input as the
/// one source, or standard output as the destination of one file). A
/// remote PATH of ~ or ~/... is in the login user's home directory there,
/// ~USER or ~USER/... in USER's (from that host's passwd database); a
/// local path's ~ is the shell's to expand. A remote source with *, ? or
/// [...] is a pattern that host expands as scp does (glob(3), no shell: a
/// wildcard matches neither / nor a leading ., \ quotes the next character,
/// no braces); its matches, in byte order, are several sources, and one that
/// matches nothing is an error naming it. Local operands are the local
/// shell's to expand. -P PORT is the ssh port of
/// every remote operand that names none. With
/// several sources, or a DEST ending in /, DEST must be an existing
/// directory; with one source, an existing directory DEST receives it under
/// its own name, otherwise the copy is named DEST (as cp does).
///
/// Between two remote hosts the data goes from one to the other directly,
/// not through this machine. Every file is written under a temporary name
/// beside its target and renamed into place only once its checksum
/// matched: a file is never seen half-written under its name, and an
/// existing one is replaced only by a complete copy. Symbolic links are
/// copied as links, hard links inside the copy as hard links, sparse files
/// keep their holes; devices, FIFOs and sockets are skipped with a warning.
/// Nothing is ever written outside DEST: a symbolic link in DEST's tree is
/// not followed.
///
/// With -r --delete, DEST becomes a mirror of the one SRC, whether it
/// exists or not (as rsync -a --delete SRC/ DEST/; a second run never makes
/// DEST/SRC): what is new or changed is copied (as --resume decides, -c by
/// content), then what DEST holds that SRC lacks is removed, inside DEST
/// only (a symbolic link as a link; its target is untouched). Nothing is
/// removed unless every file was copied. -n lists what would be removed
/// and changes nothing.
///
/// A file that cannot be read or written is reported (host, path, why) and
/// the rest is still copied; the exit status is then 1. Transport,
/// protection (--integrity), compression, rate limit, ssh options and
/// self-install work as in rdpipe(1).
#[derive(Debug, Parser)]
#[command(name = "rdcp", version, verbatim_doc_comment, after_help = EXAMPLES)]
pub struct CpArgs {
    /// The sources, then the destination.
    #[arg(value_name = "SRC... DEST", required = true, num_args = 2..)]
    pub operands: Vec<String>,

    /// Copy directories and what is in them (implies -p, like cp -a).
    #[arg(short, long)]
    pub recursive: bool,

    /// Keep modes and modification times (and owner and group when the
    /// destination side runs as root).
    #[arg(short, long)]
    pub preserve: bool,

    /// With -p (the default with -r): drop the set-uid and set-gid bits the
    /// sender's files have (a warning line gives the count), for trees from
    /// a host you do not fully trust. Owners are still kept as root.
    #[arg(long)]
    pub no_setid: bool,

    /// With -r: do not keep modes and times (new files get the source's
    /// permission bits less the umask).
    #[arg(long, conflicts_with = "preserve")]
    pub no_preserve: bool,

    /// Continue an interrupted copy: first list what DEST already holds (one
    /// more connection to its host); files there with the same size and
    /// mtime (kept with -p, the default with -r) are not sent again, and a
    /// file cut short continues from its partial copy (the temporary file
    /// the interrupted run left) once both sides' hashes of that part agree,
    /// whatever the sources (one, several, a remote pattern's matches); a
    /// partial copy that no longer fits is written over from its start.
    #[arg(long)]
    pub resume: bool,

    /// Compare by content too (implies --resume): the destination's host
    /// hashes every file it holds where the sources land, the sources' host
    /// hashes each source whose size and mtime match, and a file is skipped
    /// only when the hashes agree as well (one more read of both sides; a
    /// mismatch is named in a warning and sent again).
    #[arg(short = 'c', long)]
    pub checksum: bool,

    /// With -r and one SRC: make DEST a mirror of SRC (DEST is SRC's copy
    /// itself, never DEST/SRC): copy what is new or changed (implies
    /// --resume), then remove beneath DEST what SRC does not have (only
    /// when every file was copied; -v names each removed entry, -n lists
    /// them and changes nothing). Refuses DEST / or a home directory on its
    /// host unless --force-delete; not with --streams.
    #[arg(long)]
    pub delete: bool,

    /// With --delete: DEST may be / or a home directory (of the login user
    /// there, or any user in that host's /etc/passwd).
    #[arg(long, requires = "delete")]
    pub force_delete: bool,

    /// Copy extended attributes too: the user.* namespace and POSIX ACLs
    /// (security.* and trusted.* never travel; values over 4 KiB are skipped
    /// with a warning).
    #[arg(short = 'X', long)]
    pub xattrs: bool,

    /// Copy FIFOs, sockets and device nodes as nodes (device nodes need root
    /// on the destination's host); without it each is skipped with a
    /// warning.
    #[arg(long)]
    pub specials: bool,

    /// Copy over N transfers side by side between the two hosts (1-16):
    /// files of 32 MiB or more go in 16 MiB pieces spread over the streams,
    /// so that the protection's CPU spreads over N cores on each end (for a
    /// fast link that one stream's core cannot fill).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub streams: u32,

    /// The ssh port for every remote operand that names none itself (as
    /// scp's -P; `scp://HOST:PORT` and `[HOST:PORT]:PATH` name one).
    #[arg(short = 'P', long, value_name = "PORT",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,

    /// How to reach the hosts and move the data (as rdpipe's).
    #[command(flatten)]
    pub run: RunOpts,
}

/// One operand: where it is and its path there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// `-`: standard input or output.
    Std,
    /// A path on a host (local or over ssh).
    Path {
        /// The host.
        host: Host,
        /// The path there (`.` for an empty remote path: the home directory).
        path: String,
    },
}

/// Parses one operand in scp's syntax: `-`, a local path, `HOST:PATH` (with
/// `USER@`, `[ADDR]` or `[USER@HOST:PORT]`) or `scp://[USER@]HOST[:PORT][/PATH]`;
/// `port` (`-P`) is the ssh port of a remote operand that names none.
pub fn parse_operand(s: &str, port: Option<u16>) -> Result<Operand, String> {
    if s == "-" {
        return Ok(Operand::Std);
    }
    let op = match s.strip_prefix("scp://") {
        Some(rest) => {
            parse_uri(rest).map_err(|why| format!("{s}: not a valid scp:// URI ({why})"))?
        }
        None => parse_scp_form(s)?,
    };
    Ok(match op {
        Operand::Path {
            host: Host::Remote(mut r),
            path,
        } => {
            r.port = r.port.or(port);
            Operand::Path {
                host: Host::Remote(r),
                path,
            }
        }
        other => other,
    })
}

/// `HOST:PATH`, `USER@HOST:PATH`, `[...]:PATH`, `USER@[V6]:PATH` or a local
/// path (a colon after a slash is part of a local path, as in scp).
fn parse_scp_form(s: &str) -> Result<Operand, String> {
    // `user@[v6]:path` is rdpipe's `[user@v6]:path`.
    let s = match s.split_once("@[") {
        Some((user, rest)) if !user.contains('/') && !user.contains(':') => {
            format!("[{user}@{rest}")
        }
        _ => s.to_string(),
    };
    let colon = if s.starts_with('[') {
        s.find("]:").map(|i| i + 1)
    } else {
        s.find(':').filter(|&i| !s[..i].contains('/'))
    };
    let Some(colon) = colon else {
        // A local path: `~` is the local shell's to expand, so one it left
        // (quoted) is a name, not a home directory (`~/` stays as before).
        let path = if s.starts_with('~') && !s.starts_with("~/") {
            format!("./{s}")
        } else {
            s
        };
        return Ok(Operand::Path {
            host: Host::Local,
            path,
        });
    };
    let host = parse_segment(&format!("{}:true", &s[..colon]))
        .map_err(|e| format!("{s}: {e}"))?
        .host;
    Ok(Operand::Path {
        host,
        path: remote_path(&s[colon + 1..]),
    })
}

/// A remote path as the agent takes it: `.` (the home directory) for none.
fn remote_path(p: &str) -> String {
    if p.is_empty() {
        ".".into()
    } else {
        p.into()
    }
}

/// The part of `scp://[USER@]HOST[:PORT][/PATH]` after `scp://`, as OpenSSH's
/// scp reads it: `USER` and `PATH` percent-decoded (`%XX`), `;PARAMS` after
/// the user ignored, `[V6]` in brackets; the `/` after the authority
/// separates it from the path, which is then relative to the home directory
/// (`scp://h/x` is `~/x`, `scp://h//x` is `/x`), none is the home directory.
fn parse_uri(rest: &str) -> Result<Operand, String> {
    let (authority, path) = match rest.find('/') {
        // A `/` inside `[...]` cannot occur in an address.
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (user, hostport) = match authority.rfind('@') {
        Some(at) => {
            let u = &authority[..at];
            let u = u.split_once(';').map_or(u, |(u, _params)| u);
            if u.is_empty() {
                return Err("empty user name".into());
            }
            (Some(percent_decode(u)?), &authority[at + 1..])
        }
        None => (None, authority),
    };
    let (name, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or("no ] after the address")?;
        match after {
            "" => (addr, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (addr, Some(p)),
                None => return Err(format!("{after:?} after the address")),
            },
        }
    } else {
        match hostport.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (hostport, None),
        }
    };
    if name.is_empty() {
        return Err("no host".into());
    }
    if name.contains(['[', ']', '@']) {
        return Err(format!("{name:?} is not a host name"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("port {p:?} is not a number from 1 to 65535")),
        },
    };
    let spec = match &user {
        Some(u) => format!("[{u}@{name}]:true"),
        None => format!("[{name}]:true"),
    };
    let mut host = parse_segment(&spec)
        .map_err(|e| match e {
            PlanError::BadHost { host, why, .. } => format!("host {host:?}: {why}"),
            e => e.to_string(),
        })?
        .host;
    if let (Host::Remote(r), Some(p)) = (&mut host, port) {
        // As `[USER@HOST:PORT]:PATH` labels it.
        r.spec = format!("{}:{p}", r.spec);
        r.port = Some(p);
    }
    let path = match path.map(|p| &p[1..]) {
        None | Some("") => ".".to_string(),
        Some(p) => percent_decode(p)?,
    };
    Ok(Operand::Path {
        host,
        path: remote_path(&path),
    })
}

/// `%XX` → the byte XX (as OpenSSH's urldecode: a bad escape or `%00` is an
/// error); the result must be UTF-8.
fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .filter(|&c| c != 0)
                .ok_or_else(|| {
                    format!(
                        "bad escape {:?}",
                        s[i..].chars().take(3).collect::<String>()
                    )
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the decoded path is not UTF-8".into())
}

/// The copy as pipeline segments (checked, nothing run).
pub fn plan(a: &CpArgs) -> Result<Vec<Segment>, String> {
    let (dest, sources) = a.operands.split_last().ok_or("no destination given")?;
    let dest = parse_operand(dest, a.port)?;
    let sources = sources
        .iter()
        .map(|s| parse_operand(s, a.port))
        .collect::<Result<Vec<_>, _>>()?;
    let preserve = (a.preserve || a.recursive) && !a.no_preserve;
    let mirror = mirror_of(a, &sources, &dest)?;
    match (sources.as_slice(), dest) {
        ([Operand::Std], Operand::Std) => Err("- to -: use cat".into()),
        ([Operand::Std], Operand::Path { host, path }) => Ok(vec![Segment {
            host,
            action: Action::WriteFile {
                path,
                append: false,
            },
        }]),
        (s, _) if s.contains(&Operand::Std) => {
            Err("- is a source only when it is the only one".into())
        }
        ([Operand::Path { host, path }], Operand::Std) => {
            if a.recursive {
                return Err("-r to -: a tree cannot go to standard output".into());
            }
            Ok(vec![Segment {
                host: host.clone(),
                action: Action::ReadFile(path.clone()),
            }])
        }
        (_, Operand::Std) => Err("several sources cannot go to standard output".into()),
        (s, Operand::Path { host, path }) => {
            let src_host = match &s[0] {
                Operand::Path { host, .. } => host.clone(),
                Operand::Std => unreachable!("handled above"),
            };
            let mut paths = vec![];
            for o in s {
                match o {
                    Operand::Path { host: h, path } if *h == src_host => paths.push(path.clone()),
                    _ => {
                        return Err(format!(
                            "the sources are on different hosts ({} and more): copy from one host at a time",
                            src_host.label()
                        ))
                    }
                }
            }
            // A mirror is DEST itself, whatever DEST is now.
            let must_be_dir = (s.len() > 1 || path.ends_with('/')) && mirror.is_none();
            let glob = matches!(src_host, Host::Remote(_));
            Ok(vec![
                Segment {
                    host: src_host,
                    action: Action::Pack {
                        sources: paths,
                        recursive: a.recursive,
                        xattrs: a.xattrs,
                        specials: a.specials,
                        glob,
                        manifest: None,
                        stripe: None,
                        mirror,
                    },
                },
                Segment {
                    host,
                    action: Action::Unpack {
                        dest: path,
                        must_be_dir,
                        preserve,
                        no_setid: a.no_setid,
                        specials: a.specials,
                        resumed_top: None,
                        stripe: None,
                        mirror,
                    },
                },
            ])
        }
    }
}

/// `--delete`'s setting for both sides, checked: with -r, one source that
/// is not `-`, one stream; `None` without `--delete`.
fn mirror_of(
    a: &CpArgs,
    sources: &[Operand],
    dest: &Operand,
) -> Result<Option<rdpipe_copy::mirror::Mirror>, String> {
    if !a.delete {
        return Ok(None);
    }
    if !a.recursive {
        return Err("--delete needs -r: it makes a directory tree a mirror of another".into());
    }
    if sources.contains(&Operand::Std) || *dest == Operand::Std {
        return Err("--delete: - is a stream, not a tree to mirror".into());
    }
    if sources.len() > 1 {
        return Err(
            "--delete mirrors one source (DEST becomes its copy): name one, or run rdcp --delete once per source".into(),
        );
    }
    if a.streams > 1 {
        return Err("--delete works over one stream: drop --streams".into());
    }
    Ok(Some(rdpipe_copy::mirror::Mirror {
        dry_run: a.run.dry_run,
        force: a.force_delete,
        verbose: a.run.verbose >= 1,
    }))
}

/// `--resume`'s first step: the destination's host lists what it holds into
/// a new private directory on the sources' host (`rdpipe_copy::private`,
/// named by 128 random bits), which the copy's packer then reads and
/// removes.
fn listing(args: &CpArgs, segments: &mut [Segment], exe: &std::path::Path) -> Result<(), Failure> {
    let [Segment {
        host: src_host,
        action:
            Action::Pack {
                sources,
                manifest,
                glob,
                ..
            },
    }, Segment {
        host: dst_host,
        action:
            Action::Unpack {
                dest,
                must_be_dir,
                resumed_top,
                ..
            },
    }] = segments
    else {
        // `-` on either side: one file, nothing to resume.
        return Ok(());
    };
    let run = rdpipe_copy::private::new_id()
        .map_err(|e| fail(1, format!("no randomness for the copy's id: {e}")))?;
    let (tops, one) = tops(sources, *glob);
    *resumed_top = one;
    let mut config = args.run.clone().config();
    config.prepared = Some(vec![
        Segment {
            host: dst_host.clone(),
            action: Action::List {
                dest: dest.clone(),
                must_be_dir: *must_be_dir,
                tops: tops.clone(),
                checksum: args.checksum,
                mirror: args.delete,
            },
        },
        Segment {
            host: src_host.clone(),
            action: Action::SaveListing { run: run.clone() },
        },
    ]);
    let (outcome, _) = rdpipe_orchestrate::run::run_reported(
        config,
        LocalExe {
            exe: exe.to_path_buf(),
        },
    );
    outcome.map_err(|e| Failure {
        messages: e
            .messages()
            .into_iter()
            .map(|m| format!("listing {} for --resume: {m}", dst_host.label()))
            .collect(),
        code: e.exit_code(),
    })?;
    *manifest = Some(run);
    Ok(())
}

/// The patterns of the sources' last components that `--resume`'s listing
/// covers (a remote pattern's own, which the sources' host expands; a
/// literal name escaped: `rdpipe_copy::glob`), and the one source's name
/// when there is exactly one source and it is no pattern (see
/// `rdpipe_copy::unpack::is_resumed_as`).
fn tops(sources: &[String], glob: bool) -> (Vec<String>, Option<String>) {
    let mut names = vec![];
    let mut patterns = 0;
    let tops = sources
        .iter()
        .filter_map(|s| {
            let n = std::path::Path::new(s).file_name()?.to_string_lossy();
            if glob && rdpipe_copy::glob::is_pattern(s) {
                patterns += 1;
                Some(n.into_owned())
            } else {
                names.push(n.to_string());
                Some(rdpipe_copy::glob::escape(&n))
            }
        })
        .collect();
    let one = match (names.as_slice(), patterns) {
        ([n], 0) => Some(n.clone()),
        _ => None,
    };
    (tops, one)
}

/// Runs rdcp; `exe` is this program (run again as local agents and the ssh
/// master's guard).
pub fn run(args: CpArgs, exe: PathBuf) -> Result<(), Failure> {
    let mut segments = plan(&args).map_err(|m| fail(2, m))?;
    if args.streams > 1 && segments.len() != 2 {
        return Err(fail(
            2,
            "--streams: standard input or output is one stream (name files)",
        ));
    }
    if (args.resume || args.checksum || args.delete) && !args.run.dry_run {
        listing(&args, &mut segments, &exe)?;
    }
    let json = args.run.json.clone();
    // `--delete -n` runs: the sides exchange names only, and the
    // destination's lists what would be removed.
    let dry_run = args.run.dry_run && !args.delete;
    let streams = args.streams;
    let mut config = args.run.config();
    config.dry_run = dry_run;
    if streams > 1 && !dry_run {
        return crate::cli::cp_streams::run(config, &segments, streams, json, exe);
    }
    config.prepared = Some(segments);
    let r = crate::cli::run_opts::run_and_report(config, exe, json);
    if dry_run && streams > 1 {
        println!("{}", crate::cli::cp_streams::describe(streams));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(spec: &str) -> Host {
        parse_segment(&format!("{spec}:true")).unwrap().host
    }

    fn with_port(spec: &str, port: u16) -> Host {
        match remote(spec) {
            Host::Remote(mut r) => {
                r.port = Some(port);
                Host::Remote(r)
            }
            Host::Local => unreachable!(),
        }
    }

    /// A host with its port as part of its label too.
    fn labelled(spec: &str, port: u16) -> Host {
        match with_port(spec, port) {
            Host::Remote(mut r) => {
                r.spec = format!("{}:{port}", r.spec);
                Host::Remote(r)
            }
            Host::Local => unreachable!(),
        }
    }

    #[test]
    fn scp_uris() {
        let p = |s: &str| parse_operand(s, None).unwrap();
        let at = |host: Host, path: &str| Operand::Path {
            host,
            path: path.into(),
        };
        assert_eq!(p("scp://h"), at(remote("h"), "."));
        assert_eq!(p("scp://h/"), at(remote("h"), "."));
        assert_eq!(p("scp://h/tmp/x"), at(remote("h"), "tmp/x"));
        assert_eq!(p("scp://h//tmp/x"), at(remote("h"), "/tmp/x"));
        assert_eq!(p("scp://h:2222//tmp/x"), at(labelled("h", 2222), "/tmp/x"));
        assert_eq!(p("scp://h:2222"), at(labelled("h", 2222), "."));
        assert_eq!(p("scp://u@h/d/"), at(remote("u@h"), "d/"));
        assert_eq!(p("scp://u@h:22/d"), at(labelled("u@h", 22), "d"));
        assert_eq!(p("scp://u;fp=x@h/d"), at(remote("u@h"), "d"));
        assert_eq!(p("scp://h/a%20b%2Fc"), at(remote("h"), "a b/c"));
        assert_eq!(p("scp://[::1]:22/x"), at(labelled("[::1]", 22), "x"));
        assert_eq!(p("scp://[::1]//x"), at(remote("[::1]"), "/x"));
        assert_eq!(p("scp://u@[fe80::1]"), at(remote("[u@fe80::1]"), "."));
        // -P: for every remote operand that names no port.
        let q = |s: &str| parse_operand(s, Some(2200)).unwrap();
        assert_eq!(q("h:x"), at(with_port("h", 2200), "x"));
        assert_eq!(q("u@h:/x"), at(with_port("u@h", 2200), "/x"));
        assert_eq!(q("scp://h/x"), at(with_port("h", 2200), "x"));
        assert_eq!(q("scp://h:7/x"), at(labelled("h", 7), "x"));
        assert_eq!(q("[h:7]:x"), at(remote("[h:7]"), "x"));
        assert_eq!(q("/local"), at(Host::Local, "/local"));
        assert_eq!(q("-"), Operand::Std);
        for bad in [
            "scp://",
            "scp:///x",
            "scp://@h/x",
            "scp://h:/x",
            "scp://h:abc/x",
            "scp://h:0/x",
            "scp://h:70000",
            "scp://[::1/x",
            "scp://[::1]x/y",
            "scp://h/%zz",
            "scp://h/%0",
            "scp://h/%00",
            "scp://h/%ff",
            "scp://h;x/y",
            "scp://-oProxyCommand=x/y",
        ] {
            let e = parse_operand(bad, None).unwrap_err();
            assert!(e.starts_with(bad) && !e.contains('\n'), "{bad}: {e}");
        }
    }

    #[test]
    fn port_flag() {
        let segs = plan(&args(&["-P", "2222", "f", "h:/x"])).unwrap();
        assert_eq!(segs[1].host, with_port("h", 2222));
        assert!(CpArgs::try_parse_from(["rdcp", "-P", "0", "a", "h:b"]).is_err());
        assert!(CpArgs::try_parse_from(["rdcp", "-P", "x", "a", "h:b"]).is_err());
        let segs = plan(&args(&["scp://h:1/a", "scp://u@g/b"])).unwrap();
        assert_eq!(segs[0].host, labelled("h", 1));
        assert_eq!(segs[1].host, remote("u@g"));
    }

    #[test]
    fn operands_follow_scp() {
        let p = |s: &str| parse_operand(s, None).unwrap();
        let at = |host: Host, path: &str| Operand::Path {
            host,
            path: path.into(),
        };
        assert_eq!(p("-"), Operand::Std);
        assert_eq!(p("a/b"), at(Host::Local, "a/b"));
        assert_eq!(p("./x:y"), at(Host::Local, "./x:y"));
        assert_eq!(p("h:/d"), at(remote("h"), "/d"));
        assert_eq!(p("h:"), at(remote("h"), "."));
        assert_eq!(p("u@h:d e"), at(remote("u@h"), "d e"));
        assert_eq!(p("[fe80::1]:/x"), at(remote("[fe80::1]"), "/x"));
        assert_eq!(p("u@[fe80::1]:/x"), at(remote("[u@fe80::1]"), "/x"));
        assert_eq!(p("localhost:/x"), at(Host::Local, "/x"));
        assert_eq!(p("[u@h:2222]:/x"), at(remote("[u@h:2222]"), "/x"));
        // `~` on a host is the agent's to expand there; a local one the
        // shell's (a `~NAME` it left is a file name).
        assert_eq!(p("h:~"), at(remote("h"), "~"));
        assert_eq!(p("h:~u/x"), at(remote("h"), "~u/x"));
        assert_eq!(p("~u/x"), at(Host::Local, "./~u/x"));
        assert_eq!(p("~"), at(Host::Local, "./~"));
        assert_eq!(p("~/x"), at(Host::Local, "~/x"));
    }

    fn args(v: &[&str]) -> CpArgs {
        CpArgs::try_parse_from(std::iter::once("rdcp").chain(v.iter().copied())).unwrap()
    }

    #[test]
    fn plans() {
        let segs = plan(&args(&["-r", "h1:/a", "h1:b", "h2:/dst"])).unwrap();
        assert_eq!(segs.len(), 2);
        assert_eq!(
            segs[0].action,
            Action::Pack {
                sources: vec!["/a".into(), "b".into()],
                recursive: true,
                xattrs: false,
                specials: false,
                glob: true,
                manifest: None,
                stripe: None,
                mirror: None
            }
        );
        assert_eq!(
            segs[1].action,
            Action::Unpack {
                dest: "/dst".into(),
                must_be_dir: true,
                preserve: true,
                no_setid: false,
                specials: false,
                resumed_top: None,
                stripe: None,
                mirror: None
            }
        );
        let segs = plan(&args(&["f", "h:/x"])).unwrap();
        assert!(matches!(
            &segs[1].action,
            Action::Unpack {
                must_be_dir: false,
                preserve: false,
                ..
            }
        ));
        let segs = plan(&args(&["f", "h:/x/"])).unwrap();
        assert!(matches!(
            &segs[1].action,
            Action::Unpack {
                must_be_dir: true,
                ..
            }
        ));
        assert!(matches!(
            &plan(&args(&["-", "h:/x"])).unwrap()[0].action,
            Action::WriteFile { .. }
        ));
        assert!(matches!(
            &plan(&args(&["h:/x", "-"])).unwrap()[0].action,
            Action::ReadFile(_)
        ));
        assert!(plan(&args(&["h1:a", "h2:b", "c"]))
            .unwrap_err()
            .contains("different hosts"));
        assert!(plan(&args(&["-", "a", "c"])).is_err());
        assert!(plan(&args(&["-r", "h:a", "-"])).is_err());
        assert!(CpArgs::try_parse_from(["rdcp", "only-one"]).is_err());
    }

    #[test]
    fn delete_mirrors_one_tree_as_dest_itself() {
        let segs = plan(&args(&["-rv", "--delete", "src", "h:/dst/"])).unwrap();
        let want = Some(rdpipe_copy::mirror::Mirror {
            dry_run: false,
            force: false,
            verbose: true,
        });
        assert!(matches!(&segs[0].action, Action::Pack { mirror, .. } if *mirror == want));
        // DEST is the copy itself, trailing / or not.
        assert!(matches!(
            &segs[1].action,
            Action::Unpack { mirror, must_be_dir: false, .. } if *mirror == want
        ));
        let segs = plan(&args(&["-rn", "--delete", "--force-delete", "src", "h:/"])).unwrap();
        assert!(matches!(
            &segs[1].action,
            Action::Unpack { mirror: Some(m), .. } if m.dry_run && m.force && !m.verbose
        ));
        for (bad, why) in [
            (&["--delete", "src", "h:d"][..], "needs -r"),
            (&["-r", "--delete", "-", "h:d"], "- is a stream"),
            (&["-r", "--delete", "h:d", "-"], "- is a stream"),
            (&["-r", "--delete", "a", "b", "h:d"], "mirrors one source"),
            (
                &["-r", "--delete", "--streams", "2", "a", "h:d"],
                "one stream",
            ),
        ] {
            let e = plan(&args(bad)).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{bad:?}: {e}");
        }
        assert!(CpArgs::try_parse_from(["rdcp", "-r", "--force-delete", "a", "h:b"]).is_err());
    }
}
