//! Unit tests of the parent module.
use super::*;
use std::time::Duration;

fn round_trip_from(m: FromAgent) {
    let line = m.to_string();
    assert!(!line.contains('\n'), "{line:?}");
    assert_eq!(line.parse::<FromAgent>(), Ok(m), "{line:?}");
}

#[test]
fn every_agent_message_round_trips() {
    for dir in [Direction::In, Direction::Out] {
        round_trip_from(FromAgent::Port { dir, port: 4242 });
        round_trip_from(FromAgent::Bytes {
            dir,
            bytes: 1 << 40,
        });
        round_trip_from(FromAgent::Done {
            dir,
            report: HopReport {
                bytes: 12,
                checksum: 0xff,
                secs: 0.5,
                transport: "rdma (rxe0, write-with-imm)".into(),
                integrity: rdpipe_wire::Integrity::Encrypt,
                compress: None,
                reconnects: vec![],
            },
        });
        for levels in [None, Some((1, 6))] {
            round_trip_from(FromAgent::Done {
                dir,
                report: HopReport {
                    bytes: 1 << 30,
                    checksum: 0xff,
                    secs: 0.5,
                    transport: "tcp".into(),
                    integrity: rdpipe_wire::Integrity::Mac,
                    compress: Some(CompressSummary {
                        mode: rdpipe_wire::Compress::Zstd(3),
                        raw: 1 << 30,
                        wire: 1 << 28,
                        levels,
                    }),
                    reconnects: vec![],
                },
            });
        }
    }
    round_trip_from(FromAgent::Hello { version: PROTOCOL });
    round_trip_from(FromAgent::Fabric(vec![]));
    round_trip_from(FromAgent::Fabric(vec![
        "10.0.0.2/24".parse().unwrap(),
        "fd00::2/64".parse().unwrap(),
        "192.168.7.1/32".parse().unwrap(),
    ]));
    for e in [CmdExit::Code(3), CmdExit::Signal(9), CmdExit::Killed] {
        round_trip_from(FromAgent::Exit(e));
    }
    for part in [Part::In, Part::Out, Part::Cmd, Part::File, Part::Agent] {
        for kind in [
            FailKind::Error,
            FailKind::StoppedReading,
            FailKind::Echo,
            FailKind::Stopped,
        ] {
            round_trip_from(FromAgent::fail(part, kind, 5, "x: No space left on device"));
            round_trip_from(FromAgent::fail(part, kind, 1, ""));
        }
    }
    round_trip_from(FromAgent::End { ok: true });
    round_trip_from(FromAgent::End { ok: false });
    round_trip_from(FromAgent::Size(4 << 20));
    round_trip_from(FromAgent::Usage(Usage::default()));
    round_trip_from(FromAgent::Munge(
        CredLine::new("MUNGE:AwQFAADU44w+JEpES1IBaTlrQPY8=:").unwrap(),
    ));
    for bad in ["MUNGE", "MUNGE x", "MUNGE MUNGE:a b:"] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad}");
    }
    let t = |u, s| CpuTimes {
        user: Duration::from_micros(u),
        system: Duration::from_micros(s),
    };
    round_trip_from(FromAgent::Usage(Usage {
        agent: t(1_230_000, 450_001),
        command: t(u64::MAX / 2, 7),
    }));
    round_trip_from(FromAgent::Copied(CopyCounts::Pack {
        sent: 1841,
        bytes: 6 << 30,
        unreadable: 1,
        changed: 2,
        skipped: 3,
        resumed: 4,
        skipped_bytes: u64::MAX,
    }));
    round_trip_from(FromAgent::Copied(CopyCounts::Unpack {
        created: 0,
        bytes: 0,
        failed: 9,
        changed: 0,
        deleted: 12,
    }));
    // An agent that counts no deletions writes four fields.
    assert_eq!(
        "COPIED unpack 1 2 3 4".parse::<FromAgent>(),
        Ok(FromAgent::Copied(CopyCounts::Unpack {
            created: 1,
            bytes: 2,
            failed: 3,
            changed: 4,
            deleted: 0,
        }))
    );
    for bad in [
        "COPIED",
        "COPIED pack",
        "COPIED pack 1 2 3 4 5 6",
        "COPIED pack 1 2 3 4 5 6 7 8",
        "COPIED unpack 1 2 3 -4",
        "COPIED unpack 1 2 3 4 5 6",
        "COPIED both 1 2 3 4",
        "COPIED unpack  1 2 3 4",
    ] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad:?}");
    }
}

#[test]
fn every_rdpipe_message_round_trips() {
    for m in [
        ToAgent::Connect {
            dir: Direction::Out,
            addr: "fe80::1".into(),
            port: 7,
        },
        ToAgent::Probe {
            dir: Direction::In,
            port: 4791,
            addrs: vec!["10.0.0.2".parse().unwrap(), "fd00::2".parse().unwrap()],
        },
        ToAgent::Ping,
        ToAgent::Progress,
    ] {
        assert_eq!(m.to_string().parse::<ToAgent>(), Ok(m.clone()));
    }
    assert!("CONNECT sideways h 1".parse::<ToAgent>().is_err());
    assert!("CONNECT in h 99999".parse::<ToAgent>().is_err());
    assert!("NOPE".parse::<ToAgent>().is_err());
    assert_eq!(
        "PROBE out 9 10.0.0.2".parse::<ToAgent>(),
        Ok(ToAgent::Probe {
            dir: Direction::Out,
            port: 9,
            addrs: vec!["10.0.0.2".parse().unwrap()]
        })
    );
    for bad in [
        "PROBE in 9",
        "PROBE in 9 host.example",
        "PROBE in x 10.0.0.2",
        "PROBE up 9 10.0.0.2",
        &format!("PROBE in 9{}", " 10.0.0.2".repeat(MAX_PROBE + 1)),
    ] {
        assert!(bad.parse::<ToAgent>().is_err(), "{bad}");
    }
}

#[test]
fn reach_lines() {
    let via = "192.168.1.1".parse().unwrap();
    for dir in [Direction::In, Direction::Out] {
        round_trip_from(FromAgent::Reach {
            dir,
            results: vec![
                ("10.0.0.2".parse().unwrap(), Reach::Answered),
                ("10.0.1.2".parse().unwrap(), Reach::OffFabric(via)),
                ("fd00::2".parse().unwrap(), Reach::Refused),
                ("fd00::3".parse().unwrap(), Reach::Silent),
                ("10.0.3.2".parse().unwrap(), Reach::Unreachable),
                (
                    "10.0.4.2".parse().unwrap(),
                    Reach::OffFabric("fe80::1".parse().unwrap()),
                ),
            ],
        });
    }
    round_trip_from(FromAgent::Reach {
        dir: Direction::In,
        results: vec![],
    });
    assert_eq!(
        FromAgent::Reach {
            dir: Direction::Out,
            results: vec![("10.0.0.2".parse().unwrap(), Reach::OffFabric(via))],
        }
        .to_string(),
        "REACH out 10.0.0.2=off-fabric@192.168.1.1"
    );
    for bad in [
        "REACH",
        "REACH up 10.0.0.2=answered",
        "REACH in 10.0.0.2",
        "REACH in 10.0.0.2=maybe",
        "REACH in host=answered",
        "REACH in 10.0.0.2=off-fabric@nowhere",
    ] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad}");
    }
}

#[test]
fn messages_stay_one_line_and_lose_control_characters() {
    let m = FromAgent::fail(Part::Cmd, FailKind::Error, 1, "a\nb\x1b[31mc");
    let line = m.to_string();
    assert_eq!(line, "FAIL cmd error 1 a b [31mc");
    assert!(matches!(
        line.parse::<FromAgent>(),
        Ok(FromAgent::Fail { message, .. }) if message == "a b [31mc"
    ));
}

#[test]
fn malformed_lines_are_errors() {
    for bad in [
        "BYTES",
        "BYTES sideways 5",
        "BYTES in -1",
        "BYTES in 5x",
        "SIZE",
        "SIZE lots",
        "",
        "NOPE 1",
        "hello",
        "PORT out 99999",
        "PORT in",
        "DONE in 12 ff",
        "DONE in 12 zz 0.5 tcp",
        "DONE in 12 ff NaN tcp",
        "DONE in 12 ff 0.5 sha1 tcp",
        "EXIT",
        "EXIT signal x",
        "FAIL",
        "FAIL cmd",
        "FAIL cmd error",
        "FAIL cmd bad 1 x",
        "FAIL nowhere error 1 x",
        "END maybe",
        "USAGE",
        "USAGE 1 2 3",
        "USAGE 1 2 3 4 5",
        "USAGE 1 2 3 -4",
        "USAGE 1.5 2 3 4",
    ] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad:?}");
    }
    assert_eq!("NOPE 1".parse::<FromAgent>(), Err(ParseError::Unknown));
}

#[test]
fn exit_statuses() {
    assert_eq!(CmdExit::Code(3).status(), Some(3));
    assert_eq!(CmdExit::Signal(9).status(), Some(137));
    assert_eq!(CmdExit::Killed.status(), None);
}

#[test]
fn hex_round_trip() {
    let k = [0u8, 1, 0xab, 0xff];
    assert_eq!(encode_hex(&k), "0001abff");
    assert_eq!(decode_hex("0001ABff").unwrap(), k);
    assert!(decode_hex("abc").is_none());
    assert!(decode_hex("zz").is_none());
}

#[test]
fn key_lines_round_trip_and_reject_garbage() {
    let k = KeyLine {
        input: Some(vec![1, 2, 0xff]),
        output: None,
        chain: None,
        lanes: vec![],
    };
    assert_eq!(k.to_string(), "0102ff -");
    assert_eq!(k.to_string().parse::<KeyLine>(), Ok(k));
    let k = KeyLine {
        input: None,
        output: Some(vec![3]),
        chain: Some(vec![4, 5]),
        lanes: vec![],
    };
    assert_eq!(k.to_string(), "- 03 0405");
    assert_eq!(k.to_string().parse::<KeyLine>(), Ok(k));
    // A merge segment's lanes: after a `-` in the chain's place.
    let k = KeyLine {
        input: None,
        output: Some(vec![3]),
        chain: None,
        lanes: vec![vec![6], vec![7, 8]],
    };
    assert_eq!(k.to_string(), "- 03 - 06 0708");
    assert_eq!(k.to_string().parse::<KeyLine>(), Ok(k));
    for bad in [
        "",
        "abc",
        "0102",
        "zz -",
        "0102 x",
        "- - zz",
        "- - 01 02 -",
        "- - - zz",
    ] {
        assert!(bad.parse::<KeyLine>().is_err(), "{bad:?}");
    }
}

#[test]
fn fabric_lines() {
    assert_eq!("FABRIC".parse::<FromAgent>(), Ok(FromAgent::Fabric(vec![])));
    assert_eq!(
        FromAgent::Fabric(vec!["10.0.0.2/24".parse().unwrap()]).to_string(),
        "FABRIC 10.0.0.2/24"
    );
    assert!("FABRIC 10.0.0.2/40".parse::<FromAgent>().is_err());
    assert!("FABRIC eth0".parse::<FromAgent>().is_err());
}

#[test]
fn relink_lines_round_trip() {
    for m in [
        ToAgent::RelinkIn { key: vec![1, 0xab] },
        ToAgent::RelinkOut {
            addr: "10.0.0.3".into(),
            port: 4711,
            key: vec![0xff],
        },
        ToAgent::Unlink,
    ] {
        assert_eq!(m.to_string().parse::<ToAgent>(), Ok(m.clone()), "{m}");
    }
    assert_eq!(
        ToAgent::RelinkOut {
            addr: "h".into(),
            port: 1,
            key: vec![2]
        }
        .to_string(),
        "RELINK out h 1 02"
    );
    for bad in [
        "RELINK in",
        "RELINK in zz",
        "RELINK out h 1",
        "RELINK out h x 02",
    ] {
        assert!(bad.parse::<ToAgent>().is_err(), "{bad:?}");
    }
    assert_eq!(
        "RELINK 4711".parse::<FromAgent>(),
        Ok(FromAgent::RelinkPort(4711))
    );
    assert_eq!(FromAgent::RelinkPort(9).to_string(), "RELINK 9");
    assert!("RELINK x".parse::<FromAgent>().is_err());
}

proptest::proptest! {
    #[test]
    fn copied_lines_never_panic_and_round_trip(line in "COPIED[ 0-9a-z-]{0,60}", v in proptest::array::uniform7(proptest::prelude::any::<u64>())) {
        let _ = line.parse::<FromAgent>();
        let m = FromAgent::Copied(CopyCounts::Pack { sent: v[0], bytes: v[1], unreadable: v[2], changed: v[3], skipped: v[4], resumed: v[5], skipped_bytes: v[6] });
        proptest::prop_assert_eq!(m.to_string().parse::<FromAgent>(), Ok(m));
        let m = FromAgent::Copied(CopyCounts::Unpack { created: v[0], bytes: v[1], failed: v[2], changed: v[3], deleted: v[4] });
        proptest::prop_assert_eq!(m.to_string().parse::<FromAgent>(), Ok(m));
    }

    #[test]
    fn usage_lines_never_panic_and_round_trip(line in "USAGE[ 0-9.a-z-]{0,40}", v in proptest::array::uniform4(0u64..1 << 50)) {
        let _ = line.parse::<FromAgent>();
        let t = |u, s| CpuTimes { user: Duration::from_micros(u), system: Duration::from_micros(s) };
        let m = FromAgent::Usage(Usage { agent: t(v[0], v[1]), command: t(v[2], v[3]) });
        proptest::prop_assert_eq!(m.to_string().parse::<FromAgent>(), Ok(m));
    }
}

#[test]
fn lane_lines_wrap_one_line_for_one_lane() {
    let m = FromAgent::Lane {
        lane: 3,
        msg: Box::new(FromAgent::Port {
            dir: Direction::In,
            port: 4242,
        }),
    };
    assert_eq!(m.to_string(), "LANE 3 PORT in 4242");
    round_trip_from(m);
    round_trip_from(FromAgent::Lane {
        lane: 1,
        msg: Box::new(FromAgent::fail(Part::In, FailKind::Echo, 5, "gone: x y")),
    });
    round_trip_from(FromAgent::Lane {
        lane: 64,
        msg: Box::new(FromAgent::End { ok: false }),
    });
    round_trip_from(FromAgent::Lane {
        lane: 2,
        msg: Box::new(FromAgent::Spool {
            peak: 64 << 20,
            held: 0.25,
        }),
    });
    assert!("SPOOL 1 -1".parse::<FromAgent>().is_err());
    round_trip_from(FromAgent::Lane {
        lane: 3,
        msg: Box::new(FromAgent::Lines(120)),
    });
    assert!("LINES x".parse::<FromAgent>().is_err());
    assert!("SPOOL 1 NaN".parse::<FromAgent>().is_err());
    for m in [
        ToAgent::Lane {
            lane: 2,
            msg: Box::new(ToAgent::Connect {
                dir: Direction::In,
                addr: "10.0.0.1".into(),
                port: 9,
            }),
        },
        ToAgent::Lane {
            lane: 7,
            msg: Box::new(ToAgent::Unlink),
        },
    ] {
        assert_eq!(m.to_string().parse::<ToAgent>(), Ok(m.clone()));
    }
    for bad in [
        "LANE",
        "LANE 0 END ok",
        "LANE x END ok",
        "LANE 1",
        "LANE 1 LANE 2 END ok",
        "LANE 1 HELLO 10",
        "LANE 1 NOPE",
        "LANE -1 END ok",
    ] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad}");
    }
    for bad in [
        "LANE 0 UNLINK",
        "LANE 1 LANE 1 UNLINK",
        "LANE 1",
        "LANE 1 PONG",
    ] {
        assert!(bad.parse::<ToAgent>().is_err(), "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn lane_lines_never_panic(line in "LANE[ 0-9A-Za-z.-]{0,40}") {
        let _ = line.parse::<FromAgent>();
        let _ = line.parse::<ToAgent>();
    }
}

#[test]
fn forward_lines_round_trip() {
    round_trip_from(FromAgent::Listening("127.0.0.1:4000".parse().unwrap()));
    round_trip_from(FromAgent::Listening("[::1]:22".parse().unwrap()));
    round_trip_from(FromAgent::Conn(ConnReport {
        id: 7,
        secs: 1.5,
        up: 1 << 30,
        down: 64,
        end: ConnEnd::Refused,
        peer: "127.0.0.1:5555".into(),
    }));
    assert_eq!(
        ToAgent::Stop.to_string().parse::<ToAgent>(),
        Ok(ToAgent::Stop)
    );
    for bad in [
        "CONN",
        "CONN 1 x 1 1 closed p",
        "CONN 1 1 1 1 nope p",
        "CONN 1 -1 1 1 closed p",
        "CONN 1 1 1 1 closed",
        "LISTENING host",
    ] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn conn_lines_never_panic(line in "CONN[ 0-9a-z.:-]{0,60}") {
        let _ = line.parse::<FromAgent>();
    }
}

#[test]
fn attach_lines_round_trip() {
    round_trip_from(FromAgent::Detachable("/run/user/1000/rdpipe-a-x1/s".into()));
    round_trip_from(FromAgent::Attached(0));
    round_trip_from(FromAgent::Attached(u64::MAX));
    round_trip_from(FromAgent::Pong);
    let secret = vec![0xab; 32];
    for m in [
        ToAgent::Bye,
        ToAgent::AttachKey {
            secret: secret.clone(),
        },
        ToAgent::Attach {
            secret,
            received: 17,
        },
    ] {
        assert_eq!(m.to_string().parse::<ToAgent>(), Ok(m.clone()));
    }
    for bad in [
        "ATTACHED",
        "ATTACHED -1",
        "ATTACHED x",
        "DETACHABLE",
        "DETACHABLE rel/s",
    ] {
        assert!(bad.parse::<FromAgent>().is_err(), "{bad}");
    }
    for bad in [
        "ATTACH",
        "ATTACH zz 1",
        "ATTACHKEY q",
        "ATTACH {k} x",
        "BYE now",
    ] {
        let bad = bad.replace("{k}", &"ab".repeat(32));
        assert!(bad.parse::<ToAgent>().is_err(), "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn attach_lines_never_panic(line in "(ATTACH|ATTACHED|ATTACHKEY|DETACHABLE)[ 0-9a-f/.-]{0,80}") {
        let _ = line.parse::<FromAgent>();
        let _ = line.parse::<ToAgent>();
    }
}
