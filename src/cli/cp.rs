//! `rdcp`'s flags and its plan: the operands, in scp's syntax, become a
//! two-segment pipeline (the sources' host packs, the destination's host
//! unpacks) that the orchestrator runs exactly as it runs rdpipe's; remote to
//! remote goes host to host.

use crate::cli::common::{fail, Failure};
use crate::cli::run_opts::RunOpts;
use clap::Parser;
use rdpipe_orchestrate::run::LocalExe;
use rdpipe_plan::{parse_segment, Action, Host, Segment};
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

  # standard input to a file on a host, and a file to standard output:
  zfs send tank/x@s | rdcp - host:/backup/x.zfs
  rdcp host:/var/log/syslog - | less";

/// rdcp's exit statuses, for the man page.
pub const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Every file was copied whole and verified."),
    ("1", "Some files were not copied (one line each names it and why: unreadable, not writable, a symbolic link in the destination's path, changed while read); the others were, each only once verified. Also any other failure: ssh, a transfer, the destination."),
    ("2", "Bad arguments: no destination, a directory without -r, sources on different hosts."),
    ("127", "rdrecv was not found on a host and rdcp could not install itself there."),
    ("130, 143", "Interrupted by SIGINT or SIGTERM; files already renamed into place stay, the one being written stays under its temporary name, for --resume."),
];

/// Copy files and directory trees between hosts, over RDMA or TCP, set up
/// over SSH.
///
/// Operands as for scp: a local PATH, HOST:PATH, USER@HOST:PATH,
/// [ADDR]:PATH or USER@[ADDR]:PATH (IPv6), or - (standard input as the one
/// source, or standard output as the destination of one file). With
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
    /// the interrupted run left) once both sides' hashes of that part agree.
    #[arg(long)]
    pub resume: bool,

    /// Compare by content too (implies --resume): the destination's host
    /// hashes every file it holds where the sources land, the sources' host
    /// hashes each source whose size and mtime match, and a file is skipped
    /// only when the hashes agree as well (one more read of both sides; a
    /// mismatch is named in a warning and sent again).
    #[arg(short = 'c', long)]
    pub checksum: bool,

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

/// Parses one operand in scp's syntax.
pub fn parse_operand(s: &str) -> Result<Operand, String> {
    if s == "-" {
        return Ok(Operand::Std);
    }
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
        return Ok(Operand::Path {
            host: Host::Local,
            path: s,
        });
    };
    let host = parse_segment(&format!("{}:true", &s[..colon]))
        .map_err(|e| format!("{s}: {e}"))?
        .host;
    let path = &s[colon + 1..];
    Ok(Operand::Path {
        host,
        path: if path.is_empty() {
            ".".into()
        } else {
            path.into()
        },
    })
}

/// The copy as pipeline segments (checked, nothing run).
pub fn plan(a: &CpArgs) -> Result<Vec<Segment>, String> {
    let (dest, sources) = a.operands.split_last().ok_or("no destination given")?;
    let dest = parse_operand(dest)?;
    let sources = sources
        .iter()
        .map(|s| parse_operand(s))
        .collect::<Result<Vec<_>, _>>()?;
    let preserve = (a.preserve || a.recursive) && !a.no_preserve;
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
            let must_be_dir = s.len() > 1 || path.ends_with('/');
            Ok(vec![
                Segment {
                    host: src_host,
                    action: Action::Pack {
                        sources: paths,
                        recursive: a.recursive,
                        xattrs: a.xattrs,
                        specials: a.specials,
                        manifest: None,
                        stripe: None,
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
                    },
                },
            ])
        }
    }
}

/// `--resume`'s first step: the destination's host lists what it holds into
/// a new private directory on the sources' host (`rdpipe_copy::private`,
/// named by 128 random bits), which the copy's packer then reads and
/// removes.
fn listing(args: &CpArgs, segments: &mut [Segment], exe: &std::path::Path) -> Result<(), Failure> {
    let [Segment {
        host: src_host,
        action: Action::Pack {
            sources, manifest, ..
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
    let tops: Vec<String> = sources
        .iter()
        .filter_map(|s| std::path::Path::new(s).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    if let [t] = tops.as_slice() {
        *resumed_top = Some(t.clone());
    }
    let mut config = args.run.clone().config();
    config.prepared = Some(vec![
        Segment {
            host: dst_host.clone(),
            action: Action::List {
                dest: dest.clone(),
                must_be_dir: *must_be_dir,
                tops: tops.clone(),
                checksum: args.checksum,
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
    if (args.resume || args.checksum) && !args.run.dry_run {
        listing(&args, &mut segments, &exe)?;
    }
    let json = args.run.json.clone();
    let (dry_run, streams) = (args.run.dry_run, args.streams);
    let mut config = args.run.config();
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

    #[test]
    fn operands_follow_scp() {
        let p = |s: &str| parse_operand(s).unwrap();
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
                manifest: None,
                stripe: None
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
                stripe: None
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
}
