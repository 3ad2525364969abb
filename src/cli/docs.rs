//! Man pages and shell completions, generated from the same clap definitions as
//! `--help`, so they cannot say something the tools do not do. The committed files
//! in `man/` and `completions/` are checked against this by `tests/integration/docs.rs`;
//! `RDPIPE_UPDATE_DOCS=1 cargo test --test integration docs::` rewrites them.

use clap::CommandFactory;
use clap_complete::Shell;
use roff::{bold, roman, Roff};

/// The documented exit statuses, shared by rdsend and rdrecv (rdpipe adds its own).
pub const ENDPOINT_EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "The whole stream was delivered and verified (byte count and checksum)."),
    ("1", "Local failure: input or output file, resources."),
    ("2", "Bad command line or key (missing, unreadable, empty)."),
    ("3", "Authentication failed: the two ends have different keys."),
    ("4", "The stream is incomplete or corrupt: truncated, length or checksum mismatch, connection lost."),
    ("5", "The stream was aborted: the receiver's output was closed (EPIPE) or the peer gave up."),
    ("6", "Could not connect, resolve the host, or listen on the port."),
    ("7", "--transport rdma was required but RDMA cannot be used, or the two ends' --transport conflict."),
    ("8", "Protocol error: the peer is not rdma-pipe, speaks another version, sent garbage, or said nothing in time."),
    ("9", "The stream failed its integrity check: it was altered on the way (MAC, encrypted chunk, End or Done tag); nothing was declared good and an output FILE was not replaced."),
];

const ENDPOINT_ENV: &[(&str, &str)] = &[
    ("RDPIPE_KEY", "The shared key, used when KEY is omitted or given as -, and no --key-file is given. Keeps the key out of ps(1)."),
    ("RDPIPE_RDMA_NO_IMM", "When set to 1, the RDMA transport signals chunks with WRITE followed by SEND instead of WRITE_WITH_IMM (what iWARP devices need; also used by the tests)."),
    ("RDPIPE_TCP_SEND", "threaded, inline or adaptive pins how the TCP sender writes (through its writer thread, or right after reading each chunk, or timing both in turn and keeping the faster). By default: threaded to a peer on loopback, adaptive otherwise; which way wins depends on the path (loopback, veth, NIC)."),
    ("RUST_LOG", "Log filter (e.g. debug), overriding -vv."),
    ("NO_COLOR", "When set and not empty, messages are never coloured."),
];

/// Everything a man page needs besides the clap definition.
pub struct DocCommand {
    /// Program name.
    pub name: &'static str,
    /// The clap definition.
    pub command: clap::Command,
    /// Examples, one per paragraph (`# comment` then command lines).
    pub examples: &'static str,
    /// EXIT STATUS entries.
    pub exit_status: &'static [(&'static str, &'static str)],
    /// ENVIRONMENT entries.
    pub environment: &'static [(&'static str, &'static str)],
    /// FILES entries.
    pub files: &'static [(&'static str, &'static str)],
    /// SEE ALSO.
    pub see_also: &'static str,
}

/// The tools documented here.
pub fn commands() -> Vec<DocCommand> {
    vec![
        DocCommand {
            name: "rdsend",
            command: super::send::SendArgs::command(),
            examples: super::send::EXAMPLES,
            exit_status: ENDPOINT_EXIT_STATUS,
            environment: ENDPOINT_ENV,
            files: &[("FILE", "The input, instead of standard input. A regular file also gives the progress line a percentage and ETA.")],
            see_also: "rdrecv(1), rdpipe(1), ib_write_bw(1), socat(1), pv(1)",
        },
        DocCommand {
            name: "rdrecv",
            command: super::recv::RecvArgs::command(),
            examples: super::recv::EXAMPLES,
            exit_status: ENDPOINT_EXIT_STATUS,
            environment: ENDPOINT_ENV,
            files: &[("FILE", "The output, instead of standard output; created or truncated only once the sender has authenticated.")],
            see_also: "rdsend(1), rdpipe(1), ib_write_bw(1), socat(1), pv(1)",
        },
        DocCommand {
            name: "rdpipe",
            command: super::pipe::PipeArgs::command(),
            examples: super::pipe::EXAMPLES,
            exit_status: super::pipe::EXIT_STATUS,
            environment: &[
                ("RDPIPE_KEY", "Not used: rdpipe makes a fresh random key for each pipeline and hands it to each endpoint on its SSH channel's standard input, never on a command line or in the environment."),
                ("RUST_LOG", "Log filter (e.g. debug), overriding -vv; handed on to the endpoints on every host."),
                ("RDPIPE_DEBUG", "When set (not empty or 0), as -vv: the debug log of the set-up and teardown, with every control line from the endpoints."),
                ("RDPIPE_TCP_SEND, RDPIPE_RDMA_NO_IMM", "As for rdsend(1) and rdrecv(1); rdpipe hands them on to the endpoints on every host (ssh itself passes no environment on)."),
                ("RDPIPE_RELAY_COPY", "When set to 1, a relay host (a relay-only HOST: segment, or a --to sink that passes the stream on) copies each buffer from its incoming to its outgoing transfer even where both are RDMA on one device under --integrity checksum, instead of forwarding it from the receive ring with an RDMA WRITE (zero-copy); for comparison. Handed on to every host."),
                ("NO_COLOR", "When set and not empty, messages are never coloured."),
                ("SSH_AUTH_SOCK", "Used by ssh as usual: rdpipe's ssh runs with BatchMode=yes, so keys must be usable without a prompt."),
            ],
            files: &[
                ("~/.ssh/config", "Host aliases, users, ports and options for every host (or the file given with -F)."),
                ("$XDG_RUNTIME_DIR/rdpipe-*/, /tmp/rdpipe-*/", "The ssh control sockets of a running pipeline; removed when it ends."),
            ],
            see_also: "rdsend(1), rdrecv(1), rdpipe-doctor(1), rdpipe-forward(1), ssh(1), ssh_config(5), sshd_config(5)",
        },
        DocCommand {
            name: "rdcp",
            command: super::cp::CpArgs::command(),
            examples: super::cp::EXAMPLES,
            exit_status: super::cp::EXIT_STATUS,
            environment: &[
                ("RDPIPE_KEY", "Not used: each copy gets a fresh random key, handed to each endpoint on its SSH channel's standard input."),
                ("RUST_LOG, RDPIPE_DEBUG, RDPIPE_TCP_SEND, RDPIPE_RDMA_NO_IMM", "As for rdpipe(1)."),
                ("NO_COLOR", "When set and not empty, messages are never coloured."),
                ("SSH_AUTH_SOCK", "Used by ssh as usual (BatchMode=yes: keys must be usable without a prompt)."),
            ],
            files: &[
                ("~/.ssh/config", "Host aliases, users, ports and options for every host (or the file given with -F)."),
                ("DIR/.NAME.rdcp-PID-N", "A file being received, renamed to DIR/NAME once its checksum matched; removed when that file fails its check, kept with what had arrived when the copy is cut short (continued by --resume)."),
                ("$TMPDIR/.rdcp-RANDOM/listing", "With --resume or --checksum, on the sources' host: the destination's listing, in a directory only its user may enter (0700), removed once read; one that a killed run left is removed by the next copy there after an hour."),
            ],
            see_also: "rdpipe(1), rdsend(1), rdrecv(1), scp(1), rsync(1), cp(1)",
        },
        DocCommand {
            name: "rdpipe-forward",
            command: super::forward::ForwardArgs::command(),
            examples: super::forward::EXAMPLES,
            exit_status: super::forward::EXIT_STATUS,
            environment: &[
                ("RDPIPE_KEY", "Not used: each forward's two hops get fresh random keys, handed to each endpoint on its SSH channel's standard input."),
                ("RUST_LOG, RDPIPE_DEBUG, RDPIPE_TCP_SEND, RDPIPE_RDMA_NO_IMM", "As for rdpipe(1)."),
                ("NO_COLOR", "When set and not empty, messages are never coloured."),
                ("SSH_AUTH_SOCK", "Used by ssh as usual (BatchMode=yes: keys must be usable without a prompt)."),
            ],
            files: &[
                ("~/.ssh/config", "Host aliases, users, ports and HostName (the data address) for every host (or the file given with -F)."),
            ],
            see_also: "rdpipe(1), ssh(1) (-L), socat(1), rsocket(7)",
        },
        DocCommand {
            name: "rdpipe-doctor",
            command: super::doctor::DoctorArgs::command(),
            examples: super::doctor::EXAMPLES,
            exit_status: super::doctor::EXIT_STATUS,
            environment: &[
                ("RDPIPE_KEY", "Not used: the test transfers are rdpipe pipelines, each with a fresh random key."),
                ("SSH_AUTH_SOCK", "Used by ssh as usual (BatchMode=yes: keys must be usable without a prompt)."),
            ],
            files: &[
                ("~/.ssh/config", "Host aliases, users, ports and HostName (the data address) for every host (or the file given with -F)."),
                ("/sys/class/infiniband/DEV/", "Read on each host: GID table with RoCE versions, network devices, NUMA node."),
                ("/etc/security/limits.conf", "Where memlock (ulimit -l) is raised when a transfer cannot pin its buffers."),
            ],
            see_also: "rdpipe(1), rdrecv(1), ibv_devinfo(1), rdma(8), show_gids(8)",
        },
    ]
}

fn section(r: &mut Roff, title: &str, entries: &[(&str, &str)]) {
    if entries.is_empty() {
        return;
    }
    r.control("SH", [title]);
    for (k, v) in entries {
        r.control("TP", []);
        r.text([bold(*k)]);
        r.text([roman(*v)]);
    }
}

/// The man page (roff) of `c`.
pub fn man_page(c: &DocCommand) -> Vec<u8> {
    let man = clap_mangen::Man::new(c.command.clone());
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    man.render_title(&mut out).expect("write to Vec");
    man.render_name_section(&mut out).expect("write to Vec");
    man.render_synopsis_section(&mut out).expect("write to Vec");
    man.render_description_section(&mut out)
        .expect("write to Vec");
    man.render_options_section(&mut out).expect("write to Vec");
    let mut r = Roff::new();
    r.control("SH", ["EXAMPLES"]);
    for para in c.examples.lines().skip_while(|l| l.starts_with("Examples")) {
        if para.trim().is_empty() {
            continue;
        }
        r.control("PP", []);
        r.control("nf", []);
        r.text([roman(para.trim_start())]);
        r.control("fi", []);
    }
    section(&mut r, "EXIT STATUS", c.exit_status);
    section(&mut r, "ENVIRONMENT", c.environment);
    section(&mut r, "FILES", c.files);
    r.control("SH", ["SEE ALSO"]);
    r.text([roman(c.see_also)]);
    out.extend_from_slice(r.to_roff().as_bytes());
    man.render_version_section(&mut out).expect("write to Vec");
    out
}

/// The shells we ship completions for, with the file name each expects.
pub fn completion_files(name: &str) -> Vec<(Shell, String)> {
    vec![
        (Shell::Bash, format!("{name}.bash")),
        (Shell::Zsh, format!("_{name}")),
        (Shell::Fish, format!("{name}.fish")),
    ]
}

/// The completion script of `c` for `shell`.
pub fn completion(c: &DocCommand, shell: Shell) -> Vec<u8> {
    let mut cmd = c.command.clone();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, c.name, &mut out);
    out
}
