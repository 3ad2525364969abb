use super::*;
use proptest::prelude::*;

fn path(s: &str) -> RelPath {
    RelPath::new(s.as_bytes().to_vec()).expect("valid test path")
}

/// An entry and, for a file, its data and trailer, as the encoder lays them out.
#[derive(Debug, Clone)]
struct Item {
    entry: Entry,
    data: Vec<u8>,
    end: Option<FileEnd>,
}

fn encode_all(sources: u32, items: &[Item]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_start(sources, &mut out);
    for it in items {
        it.entry.encode(&mut out);
        out.extend_from_slice(&it.data);
        if let Some(e) = it.end {
            e.encode(&mut out);
        }
    }
    out
}

/// Decodes `bytes` fed in pieces cut at `cuts`; data pieces are joined back.
fn decode_all(bytes: &[u8], cuts: &[usize]) -> Result<(u32, Vec<Item>, bool), WireError> {
    let mut d = Decoder::new();
    let mut sources = None;
    let mut items: Vec<Item> = Vec::new();
    let mut at = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    points.push(bytes.len());
    for p in points {
        let piece = &bytes[at..p.max(at)];
        at = p.max(at);
        d.feed(piece, |ev| -> Result<(), WireError> {
            match ev {
                Event::Start { sources: s } => sources = Some(s),
                Event::Entry(e) => items.push(Item {
                    entry: e,
                    data: vec![],
                    end: None,
                }),
                Event::Data(b) => items.last_mut().expect("file").data.extend_from_slice(b),
                Event::FileEnd(e) => items.last_mut().expect("file").end = Some(e),
            }
            Ok(())
        })?;
    }
    Ok((sources.unwrap_or(u32::MAX), items, d.finished()))
}

fn arb_name() -> impl Strategy<Value = Vec<u8>> {
    // Any bytes but '/' and NUL, not '.' or '..': newlines and invalid UTF-8 included.
    proptest::collection::vec(1u8..=255, 1..20).prop_filter_map("no slash", |mut v| {
        v.retain(|&b| b != b'/');
        (!v.is_empty() && v != b"." && v != b"..").then_some(v)
    })
}

fn arb_path() -> impl Strategy<Value = RelPath> {
    proptest::collection::vec(arb_name(), 1..5)
        .prop_map(|cs| RelPath::new(cs.join(&b'/')).expect("valid by construction"))
}

fn arb_meta() -> impl Strategy<Value = Meta> {
    (
        0u32..0o10000,
        any::<u32>(),
        any::<u32>(),
        any::<i64>(),
        0u32..1_000_000_000,
    )
        .prop_map(|(mode, uid, gid, mtime, mtime_ns)| Meta {
            mode,
            uid,
            gid,
            mtime,
            mtime_ns,
        })
}

fn arb_item() -> impl Strategy<Value = Item> {
    prop_oneof![
        (arb_path(), arb_meta()).prop_map(|(path, meta)| Item {
            entry: Entry::Dir { path, meta },
            data: vec![],
            end: None
        }),
        (
            arb_path(),
            arb_meta(),
            proptest::collection::vec(any::<u8>(), 0..3000),
            any::<u64>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(path, meta, data, checksum, changed, unreadable)| Item {
                entry: Entry::File {
                    path,
                    meta,
                    size: data.len() as u64
                },
                data,
                end: Some(FileEnd {
                    checksum,
                    changed,
                    unreadable
                }),
            }),
        (arb_path(), arb_meta(), arb_name()).prop_map(|(path, meta, target)| Item {
            entry: Entry::Symlink { path, meta, target },
            data: vec![],
            end: None
        }),
        (arb_path(), arb_path()).prop_map(|(path, target)| Item {
            entry: Entry::HardLink { path, target },
            data: vec![],
            end: None
        }),
        (
            arb_path(),
            any::<u64>(),
            any::<i64>(),
            0u32..1_000_000_000,
            proptest::option::of(any::<u64>())
        )
            .prop_map(|(path, size, mtime, mtime_ns, hash)| Item {
                entry: Entry::Have {
                    path,
                    size,
                    mtime,
                    mtime_ns,
                    hash
                },
                data: vec![],
                end: None
            }),
        (arb_path(), arb_name(), any::<u64>(), any::<u64>()).prop_map(|(path, tmp, size, hash)| {
            Item {
                entry: Entry::Partial {
                    path,
                    tmp,
                    size,
                    hash,
                },
                data: vec![],
                end: None,
            }
        }),
        (
            arb_path(),
            arb_meta(),
            proptest::collection::vec(any::<u8>(), 0..2000),
            any::<u32>(),
            any::<u64>(),
            arb_name()
        )
            .prop_map(|(path, meta, data, offset, prefix, tmp)| Item {
                entry: Entry::Resume {
                    path,
                    meta,
                    size: offset as u64 + data.len() as u64,
                    offset: offset as u64,
                    prefix,
                    tmp
                },
                data,
                end: Some(FileEnd {
                    checksum: 7,
                    changed: false,
                    unreadable: false
                }),
            }),
        (
            arb_name().prop_map(|n| [b"user.".as_slice(), &n[..n.len().min(200)]].concat()),
            proptest::collection::vec(any::<u8>(), 0..=super::MAX_XATTR_VALUE)
        )
            .prop_map(|(name, value)| Item {
                entry: Entry::Xattr { name, value },
                data: vec![],
                end: None
            }),
        (arb_path(), arb_meta(), 0..=MAX_STRIPED, arb_name()).prop_map(
            |(path, meta, size, tmp)| {
                Item {
                    entry: Entry::Striped {
                        path,
                        meta,
                        size,
                        tmp,
                    },
                    data: vec![],
                    end: None,
                }
            }
        ),
        (
            arb_path(),
            arb_meta(),
            0u64..1000,
            proptest::collection::vec(any::<u8>(), 1..2000),
            arb_name()
        )
            .prop_map(|(path, meta, index, data, tmp)| Item {
                // The file's last piece: a short one keeps the case small.
                entry: Entry::Piece {
                    path,
                    meta,
                    size: index * PIECE_SIZE + data.len() as u64,
                    index,
                    tmp
                },
                data,
                end: Some(FileEnd {
                    checksum: 9,
                    changed: true,
                    unreadable: false
                }),
            }),
        (
            arb_path(),
            arb_name(),
            any::<u64>(),
            any::<i64>(),
            0u32..1_000_000_000,
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..600)
        )
            .prop_map(|(path, tmp, size, mtime, mtime_ns, first, bits)| {
                let size = size % MAX_STRIPED + 1;
                let first = (first % piece_count(size)) / 8 * 8;
                Item {
                    entry: Entry::Pieces {
                        path,
                        tmp,
                        size,
                        mtime,
                        mtime_ns,
                        first,
                        bits,
                    },
                    data: vec![],
                    end: None,
                }
            }),
        arb_path().prop_map(|path| Item {
            entry: Entry::Kept { path },
            data: vec![],
            end: None
        }),
        (arb_path(), arb_meta(), 1u8..=4, any::<u64>()).prop_map(|(path, meta, k, rdev)| {
            let kind = SpecialKind::from_code(k).expect("1..=4");
            Item {
                entry: Entry::Special {
                    path,
                    meta,
                    kind,
                    rdev: if kind.is_device() { rdev } else { 0 },
                },
                data: vec![],
                end: None,
            }
        }),
    ]
}

proptest! {
    #[test]
    fn any_stream_round_trips_however_it_is_cut(
        sources in any::<u32>(),
        mut items in proptest::collection::vec(arb_item(), 0..12),
        failed in any::<u64>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        items.push(Item { entry: Entry::End { entries: items.len() as u64, failed }, data: vec![], end: None });
        let bytes = encode_all(sources, &items);
        let (s, got, finished) = decode_all(&bytes, &cuts).expect("decodes");
        prop_assert_eq!(s, sources);
        prop_assert!(finished);
        prop_assert_eq!(got.len(), items.len());
        for (g, w) in got.iter().zip(&items) {
            prop_assert_eq!(&g.entry, &w.entry);
            prop_assert_eq!(&g.data, &w.data);
            prop_assert_eq!(g.end, w.end);
        }
    }

    #[test]
    fn a_truncated_stream_is_never_finished(
        items in proptest::collection::vec(arb_item(), 0..6),
        cut in any::<usize>(),
    ) {
        let mut items = items;
        items.push(Item { entry: Entry::End { entries: 0, failed: 0 }, data: vec![], end: None });
        let bytes = encode_all(1, &items);
        let cut = cut % bytes.len();
        let (_, _, finished) = decode_all(&bytes[..cut], &[]).expect("a prefix decodes");
        prop_assert!(!finished);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut bytes = Vec::new();
        encode_start(1, &mut bytes);
        bytes.extend_from_slice(&body);
        let _ = decode_all(&bytes, &cuts);
    }

    #[test]
    fn only_relative_paths_without_dot_components_are_accepted(
        comps in proptest::collection::vec(prop_oneof![
            Just(b"".to_vec()), Just(b".".to_vec()), Just(b"..".to_vec()), arb_name()
        ], 1..5),
        lead in any::<bool>(),
    ) {
        let mut p = comps.join(&b'/');
        if lead { p.insert(0, b'/'); }
        let ok = !lead && comps.iter().all(|c| !c.is_empty() && c != b"." && c != b"..");
        prop_assert_eq!(RelPath::new(p).is_ok(), ok);
    }
}

#[test]
fn hostile_headers_are_refused() {
    let mut b = Vec::new();
    encode_start(1, &mut b);
    // A directory named "../x" spelled by hand.
    let mut bad = b.clone();
    bad.push(1);
    bad.extend_from_slice(&4u16.to_be_bytes());
    bad.extend_from_slice(b"../x");
    bad.extend_from_slice(&[0; 24]);
    assert!(decode_all(&bad, &[]).is_err());
    // An absolute path.
    let mut bad = b.clone();
    bad.push(1);
    bad.extend_from_slice(&4u16.to_be_bytes());
    bad.extend_from_slice(b"/etc");
    bad.extend_from_slice(&[0; 24]);
    assert!(decode_all(&bad, &[]).is_err());
    // A name length past the limit is refused before its bytes arrive.
    let mut bad = b.clone();
    bad.push(2);
    bad.extend_from_slice(&u16::MAX.to_be_bytes());
    assert!(decode_all(&bad, &[]).is_err());
    // Mode bits past 0o7777, and bytes after the end.
    let mut bad = b.clone();
    Entry::Dir {
        path: path("d"),
        meta: Meta::default(),
    }
    .encode(&mut bad);
    let n = bad.len();
    bad[n - 24..n - 20].copy_from_slice(&0o170000u32.to_be_bytes());
    assert!(decode_all(&bad, &[]).is_err());
    let mut bad = b.clone();
    Entry::End {
        entries: 0,
        failed: 0,
    }
    .encode(&mut bad);
    bad.push(0);
    assert!(decode_all(&bad, &[]).is_err());
    // Not a stream at all.
    assert!(decode_all(b"GET / HTTP/1.1\r\n", &[]).is_err());
}

#[test]
fn a_kept_entry_is_its_tag_and_a_checked_path() {
    let mut b = Vec::new();
    Entry::Kept { path: path("t/x") }.encode(&mut b);
    assert_eq!(b, [&[14u8, 0, 3][..], b"t/x"].concat());
    let mut s = Vec::new();
    encode_start(1, &mut s);
    for bad in [&b"t/../x"[..], b"/etc", b"t//x"] {
        let mut e = s.clone();
        e.push(14);
        e.extend_from_slice(&(bad.len() as u16).to_be_bytes());
        e.extend_from_slice(bad);
        assert!(decode_all(&e, &[]).is_err(), "{bad:?}");
    }
}

#[test]
fn xattr_names_without_a_namespace_or_values_too_long_are_refused() {
    let decode = |e: Vec<u8>| {
        let mut b = Vec::new();
        super::encode_start(1, &mut b);
        b.extend_from_slice(&e);
        let mut got = Vec::new();
        Decoder::new()
            .feed::<WireError>(&b, |ev| {
                if let Event::Entry(e) = ev {
                    got.push(e);
                }
                Ok(())
            })
            .map(|_| got)
    };
    let xattr = |name: &[u8], len: u16| {
        let mut e = vec![8u8];
        e.extend_from_slice(&(name.len() as u16).to_be_bytes());
        e.extend_from_slice(name);
        e.extend_from_slice(&len.to_be_bytes());
        e.extend(std::iter::repeat_n(7u8, len as usize));
        e
    };
    assert!(decode(xattr(b"user.a", 3)).is_ok());
    assert!(decode(xattr(b"user.a", 0)).is_ok());
    assert!(decode(xattr(b"noname", 3)).is_err());
    assert!(decode(xattr(b"user.\0a", 3)).is_err());
    assert!(decode(xattr(b"user.a", 4097)).is_err());
}

#[test]
fn specials_of_unknown_kinds_or_with_stray_device_numbers_are_refused() {
    let special = |kind: u8, rdev: u64| {
        let mut b = Vec::new();
        encode_start(1, &mut b);
        Entry::Special {
            path: path("n"),
            meta: Meta::default(),
            kind: SpecialKind::Char,
            rdev,
        }
        .encode(&mut b);
        // The kind byte sits before the device number.
        let n = b.len();
        b[n - 9] = kind;
        decode_all(&b, &[])
    };
    assert!(special(3, 0x0103).is_ok());
    assert!(special(4, 0x0801).is_ok());
    assert!(special(1, 0).is_ok());
    assert!(special(0, 0).is_err());
    assert!(special(5, 0).is_err());
    assert!(special(1, 5).is_err());
    assert!(special(2, 1).is_err());
}

#[test]
fn pieces_cover_a_file_once_and_none_lies_past_its_end() {
    for size in [
        1,
        PIECE_SIZE - 1,
        PIECE_SIZE,
        PIECE_SIZE + 1,
        5 * PIECE_SIZE + 7,
    ] {
        let mut at = 0;
        for i in 0..piece_count(size) {
            let (start, len) = piece_span(size, i).unwrap();
            assert_eq!(start, at);
            assert!(len > 0 && len <= PIECE_SIZE);
            at += len;
        }
        assert_eq!(at, size);
        assert_eq!(piece_span(size, piece_count(size)), None);
    }
    assert_eq!(piece_count(0), 0);
    let piece = |size: u64, index: u64| {
        let mut b = Vec::new();
        encode_start(1, &mut b);
        Entry::Piece {
            path: path("f"),
            meta: Meta::default(),
            size,
            index,
            tmp: b".f.rdcp-s1".to_vec(),
        }
        .encode(&mut b);
        decode_all(&b, &[])
    };
    assert!(piece(PIECE_SIZE + 1, 1).is_ok());
    assert!(piece(PIECE_SIZE, 1).is_err());
    assert!(piece(0, 0).is_err());
    assert!(piece(u64::MAX, u64::MAX).is_err());
    assert!(piece(MAX_STRIPED, 0).is_ok());
    assert!(piece(MAX_STRIPED + 1, 0).is_err());
}
