//! Unit tests of the parent module.
use super::*;

/// The words as owned arguments (shared by the plan's unit tests).
pub(crate) fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// A remote host's data address in the plan's unit tests: `NAME.data`.
pub(crate) fn addr(r: &RemoteHost) -> String {
    format!("{}.data", r.name)
}

#[test]
fn doctor_after_an_option_says_where_it_goes() {
    let e = parse_segment("doctor").unwrap_err();
    assert_eq!(e, PlanError::DoctorNotFirst);
    assert!(e.to_string().contains("rdpipe doctor [OPTIONS] HOST"));
}

#[test]
fn parses_hosts_and_commands() {
    let s = parse_segment("h1:tr [:lower:] [:upper:]").unwrap();
    assert_eq!(s.action, Action::Command("tr [:lower:] [:upper:]".into()));
    let Host::Remote(r) = s.host else { panic!() };
    assert_eq!((r.name.as_str(), r.user, r.port), ("h1", None, None));

    let s = parse_segment("bob@h2: rev ").unwrap();
    let Host::Remote(r) = s.host else { panic!() };
    assert_eq!(r.user.as_deref(), Some("bob"));
    assert_eq!(r.destination(), "bob@h2");
    assert_eq!(s.action, Action::Command("rev".into()));

    let s = parse_segment("[bob@h3:2222]:cat").unwrap();
    let Host::Remote(r) = s.host else { panic!() };
    assert_eq!((r.name.as_str(), r.port), ("h3", Some(2222)));
    assert_eq!(r.spec, "bob@h3:2222");

    let s = parse_segment("[fe80::1]:cat").unwrap();
    let Host::Remote(r) = s.host else { panic!() };
    assert_eq!((r.name.as_str(), r.port), ("fe80::1", None));

    assert_eq!(parse_segment("-:cat").unwrap().host, Host::Local);
    assert_eq!(parse_segment("localhost:cat").unwrap().host, Host::Local);
    assert!(!parse_segment("me@localhost:cat").unwrap().host.is_local());
}

#[test]
fn parses_operators() {
    assert_eq!(
        parse_segment("h:< /tmp/in").unwrap().action,
        Action::ReadFile("/tmp/in".into())
    );
    assert_eq!(
        parse_segment("h:>'/tmp/a b'").unwrap().action,
        Action::WriteFile {
            path: "/tmp/a b".into(),
            append: false
        }
    );
    assert_eq!(
        parse_segment("h: >> log").unwrap().action,
        Action::WriteFile {
            path: "log".into(),
            append: true
        }
    );
    // Not operators: a heredoc, process substitution, a redirect inside a command.
    assert!(matches!(
        parse_segment("h:<<EOF").unwrap().action,
        Action::Command(_)
    ));
    assert!(matches!(
        parse_segment("h:cat > x").unwrap().action,
        Action::Command(_)
    ));
}

#[test]
fn rejects_malformed() {
    assert_eq!(
        parse_segment(":cat"),
        Err(PlanError::EmptyHost(":cat".into()))
    );
    assert_eq!(parse_segment("cat"), Err(PlanError::NoColon("cat".into())));
    assert_eq!(
        parse_segment("h:echo 'oops"),
        Err(PlanError::Unbalanced("h:echo 'oops".into()))
    );
    assert_eq!(
        parse_segment("h:echo \"a\\\""),
        Err(PlanError::Unbalanced("h:echo \"a\\\"".into()))
    );
    assert!(matches!(
        parse_segment("h:>"),
        Err(PlanError::MissingFile { op: ">", .. })
    ));
    assert!(matches!(
        parse_segment("-oProxyCommand=x:cat"),
        Err(PlanError::BadHost { .. })
    ));
    assert!(matches!(
        parse_segment("@h:cat"),
        Err(PlanError::BadHost { .. })
    ));
    assert!(matches!(
        parse_segment("[h:0]:cat"),
        Err(PlanError::BadHost { .. })
    ));
    assert!(matches!(
        parse_segment("[h]cat"),
        Err(PlanError::NoColon(_))
    ));
    assert!(matches!(
        parse_segment("h;x:cat"),
        Err(PlanError::BadHost { .. })
    ));
    assert_eq!(plan(&[], true, &addr), Err(PlanError::Empty));
}

#[test]
fn quotes() {
    assert!(quotes_balanced(r#"echo 'a"b' "c'd" e\'f"#));
    assert!(quotes_balanced(r#"echo "a\"b""#));
    assert!(!quotes_balanced("echo 'a"));
    assert!(!quotes_balanced("echo \"a"));
    assert!(!quotes_balanced("echo a\\"));
}

#[test]
fn hello_pipeline_plan() {
    let p = plan(&args(&["h1:tr a-z A-Z", "h2:rev"]), true, &addr).unwrap();
    assert_eq!(p.hops.len(), 3);
    // rdpipe sends its stdin to h1, which listens.
    assert_eq!(
        p.hops[0],
        Hop {
            from: Node::Stdin,
            to: Node::Segment(0),
            listener: Node::Segment(0),
            address: "h1.data".into()
        }
    );
    // h1 connects to h2's receiver.
    assert_eq!(p.hops[1].listener, Node::Segment(1));
    assert_eq!(p.hops[1].connector(), Node::Segment(0));
    assert_eq!(p.hops[1].address, "h2.data");
    // h2's sender listens, rdpipe connects and writes its stdout.
    assert_eq!(
        p.hops[2],
        Hop {
            from: Node::Segment(1),
            to: Node::Stdout,
            listener: Node::Segment(1),
            address: "h2.data".into()
        }
    );
    assert_eq!(p.links(0), (Link::Listen, Link::Connect));
    assert_eq!(p.links(1), (Link::Listen, Link::Listen));
}

#[test]
fn terminal_stdin_and_file_ends() {
    let p = plan(&args(&["h1:cat", "h2:> out"]), false, &addr).unwrap();
    assert_eq!(p.hops.len(), 1);
    assert_eq!(p.links(0), (Link::None, Link::Connect));
    assert_eq!(p.links(1), (Link::Listen, Link::None));

    // `<` first: rdpipe's stdin is not read even when it is a pipe.
    let p = plan(&args(&["h1:< in", "h2:>> out"]), true, &addr).unwrap();
    assert_eq!(p.hops.len(), 1);
    assert_eq!(p.hops[0].from, Node::Segment(0));

    // `<` and `>` in the middle keep their hops (drained / empty stream).
    let p = plan(
        &args(&["h1:cat", "h2:< f", "h3:> g", "h1:cat"]),
        true,
        &addr,
    )
    .unwrap();
    assert_eq!(p.hops.len(), 5);
    assert_eq!(p.links(1), (Link::Listen, Link::Connect));
    assert_eq!(p.links(2), (Link::Listen, Link::Connect));
}

#[test]
fn local_segments_connect_outward() {
    let p = plan(&args(&["-:cat", "h1:rev", "localhost:cat"]), true, &addr).unwrap();
    // stdin -> local: local agent listens on loopback.
    assert_eq!(p.hops[0].listener, Node::Segment(0));
    assert_eq!(p.hops[0].address, "127.0.0.1");
    // local -> remote: remote listens.
    assert_eq!(p.hops[1].listener, Node::Segment(1));
    assert_eq!(p.hops[1].address, "h1.data");
    // remote -> local: remote sender listens, local connects.
    assert_eq!(p.hops[2].listener, Node::Segment(1));
    assert_eq!(p.hops[2].connector(), Node::Segment(2));
    assert_eq!(p.hops[2].address, "h1.data");
    // local -> stdout: rdpipe never listens, the local agent's sender does.
    assert_eq!(p.hops[3].listener, Node::Segment(2));
    assert_eq!(p.hops[3].address, "127.0.0.1");
    assert_eq!(p.links(2), (Link::Connect, Link::Listen));
}

#[test]
fn repeated_host_uses_loopback() {
    let p = plan(&args(&["h1:cat", "h1:rev", "h2:cat"]), false, &addr).unwrap();
    assert_eq!(p.hops[0].address, "127.0.0.1");
    assert_eq!(p.hops[1].address, "h2.data");
    let r = p.remote_hosts();
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].1, vec![0, 1]);
}

#[test]
fn dry_run_text() {
    let p = plan(&args(&["h1:tr a-z A-Z", "h2:rev"]), true, &addr).unwrap();
    let t = p.describe(&how);
    assert!(t.contains("[1] h1"), "{t}");
    assert!(t.contains("(start h1)"), "{t}");
    assert!(
        t.contains(
            "[1] h1 -> [2] h2: [2] h2 listens on an ephemeral port, [1] h1 connects to h2.data"
        ),
        "{t}"
    );
    assert!(t.contains("rdpipe stdin -> [1] h1"), "{t}");
}

/// How the plan tests say a segment starts (a launcher's words in a run).
fn how(h: &Host) -> String {
    match h {
        Host::Local => "here".into(),
        Host::Remote(r) => format!("start {}", r.name),
    }
}

#[test]
fn data_host_values() {
    assert_eq!(
        parse_data_host("h1=10.0.0.1").unwrap(),
        ("h1".into(), "10.0.0.1".into())
    );
    assert!(parse_data_host("h1").is_err());
    assert!(parse_data_host("=x").is_err());
}

#[test]
fn empty_command_is_relay_only() {
    for arg in ["h:", "h:   ", "h:\t", "[u@h:2222]:", "-:"] {
        assert_eq!(parse_segment(arg).unwrap().action, Action::Relay, "{arg}");
    }
    let p = plan(&args(&["a:< f", "b:", "c:> g"]), false, &addr).unwrap();
    assert_eq!(p.segments[1].action, Action::Relay);
    assert_eq!(p.hops.len(), 2);
    assert_eq!(p.links(1), (Link::Listen, Link::Connect));
    let text = p.describe(&how);
    assert!(
        text.contains(
            "[2] b                relay only: forwards the stream unchanged, no command  (start b)"
        ),
        "{text}"
    );
    // First (fed by rdpipe's stdin) and last (to rdpipe's stdout).
    let p = plan(&args(&["b:", "c:cat"]), true, &addr).unwrap();
    assert_eq!(p.hops[0].from, Node::Stdin);
    let p = plan(&args(&["a:< f", "b:"]), false, &addr).unwrap();
    assert_eq!(p.hops[1].to, Node::Stdout);
    assert_eq!(p.hops[1].listener, Node::Segment(1));
    // Alone: stdin through b to stdout.
    let p = plan(&args(&["b:"]), true, &addr).unwrap();
    assert_eq!(p.hops.len(), 2);
    // Next to a segment on the same host: loopback.
    let p = plan(&args(&["a:< f", "a:", "c:> g"]), false, &addr).unwrap();
    assert_eq!(p.hops[0].address, "127.0.0.1");
    // Nothing to relay: a one-line error naming the segment and the fix.
    for a in [&["b:", "c:cat"][..], &["b:"][..], &["-:   ", "c:cat"][..]] {
        let e = plan(&args(a), false, &addr).unwrap_err();
        assert_eq!(e, PlanError::RelayWithoutInput(a[0].into()));
        let msg = e.to_string();
        assert!(
            msg.contains(a[0]) && msg.contains("put a segment before it"),
            "{msg}"
        );
        assert!(!msg.contains('\n'));
    }
}
