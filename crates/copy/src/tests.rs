//! Pack into memory, unpack into a directory, compare.

use super::*;
use rdpipe_wire::entry::{encode_start, Entry, FileEnd, Meta, RelPath};
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn tree(root: &Path) {
    let w = |p: &str, data: &[u8]| std::fs::write(root.join(p), data).expect("write");
    std::fs::create_dir_all(root.join("src/empty")).expect("mkdir");
    w("src/a.txt", b"hello\n");
    w(
        "src/big.bin",
        &(0..3_000_000u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<_>>(),
    );
    std::fs::write(
        root.join("src").join(OsStr::from_bytes(b"odd\nname\xff")),
        b"x",
    )
    .expect("odd");
    std::os::unix::fs::symlink("a.txt", root.join("src/link")).expect("symlink");
    std::fs::hard_link(root.join("src/a.txt"), root.join("src/hard")).expect("hardlink");
    // Sparse: 1 MiB hole, 4 KiB data, 1 MiB hole.
    let f = std::fs::File::create(root.join("src/sparse")).expect("sparse");
    f.set_len(2 << 20).expect("len");
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[9; 4096], 1 << 20).expect("data");
    std::fs::set_permissions(
        root.join("src/a.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .expect("chmod");
}

fn copy(src: &Path, dst: &Path, must_be_dir: bool) -> std::io::Result<()> {
    let mut buf = Vec::new();
    pack(
        &[src.to_path_buf()],
        PackOptions {
            recursive: true,
            xattrs: true,
            specials: false,
            direct: false,
            stripe: None,
        },
        None,
        &mut buf,
    )?;
    let mut u = Unpacker::new(
        Dest::open(dst, must_be_dir, None).map_err(std::io::Error::other)?,
        "dst",
        true,
    )
    // Small files (a hard link to one among them) created by workers.
    .with_create_threads(3);
    for piece in buf.chunks(7777) {
        u.write_all(piece)?;
    }
    u.flush()
}

#[test]
fn a_tree_round_trips_with_links_modes_and_holes() {
    let d = tempfile::tempdir().expect("tempdir");
    tree(d.path());
    let out = d.path().join("out");
    copy(&d.path().join("src"), &out, false).expect("copied");
    for f in ["a.txt", "big.bin", "sparse"] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(d.path().join("src").join(f)).unwrap(),
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read(out.join(OsStr::from_bytes(b"odd\nname\xff"))).unwrap(),
        b"x"
    );
    assert!(out.join("empty").is_dir());
    assert_eq!(
        std::fs::read_link(out.join("link")).unwrap(),
        Path::new("a.txt")
    );
    let (a, h) = (
        std::fs::metadata(out.join("a.txt")).unwrap(),
        std::fs::metadata(out.join("hard")).unwrap(),
    );
    assert_eq!(a.ino(), h.ino(), "hard link kept");
    assert_eq!(a.mode() & 0o777, 0o640);
    let src_a = std::fs::metadata(d.path().join("src/a.txt")).unwrap();
    assert_eq!(
        (a.mtime(), a.mtime_nsec()),
        (src_a.mtime(), src_a.mtime_nsec())
    );
    let sp = std::fs::metadata(out.join("sparse")).unwrap();
    assert!(
        sp.blocks() * 512 < 1 << 20,
        "holes kept: {} blocks",
        sp.blocks()
    );
    // No temporary file left anywhere.
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names.iter().all(|n| !n.as_bytes().starts_with(b".")),
        "{names:?}"
    );
    // Into an existing directory: it lands as out/src.
    copy(&d.path().join("src"), &out, true).expect("copied into");
    assert_eq!(std::fs::read(out.join("src/a.txt")).unwrap(), b"hello\n");
}

/// The destination `dest`'s resume listing for one source named `top`, read
/// back as the sending side reads it (through a file in `scratch`).
fn listing_of(dest: &Path, top: &[u8], scratch: &Path) -> Manifest {
    listing_with(dest, top, scratch, false)
}

/// As [`listing_of`], with content hashes when `checksum`.
fn listing_with(dest: &Path, top: &[u8], scratch: &Path, checksum: bool) -> Manifest {
    let mut listing = Vec::new();
    list::list(dest, false, &[top.to_vec()], checksum, &mut listing).unwrap();
    let path = scratch.join("listing");
    std::fs::write(&path, &listing).unwrap();
    Manifest::read(&path).unwrap()
}

fn entry(e: Entry) -> Vec<u8> {
    let mut v = Vec::new();
    e.encode(&mut v);
    v
}

#[test]
fn a_stream_cannot_write_through_a_symlink_in_the_destination() {
    let d = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let dst = d.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    std::os::unix::fs::symlink(outside.path(), dst.join("top")).unwrap();
    let mut s = Vec::new();
    encode_start(1, &mut s);
    let path = RelPath::new(b"top/pwned".to_vec()).unwrap();
    s.extend(entry(Entry::File {
        path,
        meta: Meta {
            mode: 0o644,
            ..Meta::default()
        },
        size: 3,
    }));
    s.extend_from_slice(b"bad");
    FileEnd {
        checksum: rdpipe_wire::checksum::xxh3_64(b"bad"),
        changed: false,
        unreadable: false,
    }
    .encode(&mut s);
    s.extend(entry(Entry::End {
        entries: 1,
        failed: 0,
    }));
    let mut u = Unpacker::new(Dest::open(&dst, true, None).unwrap(), "dst", false);
    u.write_all(&s)
        .expect("a refused file is not a stream error");
    let err = u.flush().expect_err("the run fails");
    assert!(err.to_string().contains("1 not written here"), "{err}");
    assert!(!outside.path().join("pwned").exists());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn a_wrong_checksum_or_a_truncated_stream_publishes_nothing() {
    let d = tempfile::tempdir().expect("tempdir");
    let mut s = Vec::new();
    encode_start(1, &mut s);
    let path = RelPath::new(b"f".to_vec()).unwrap();
    s.extend(entry(Entry::File {
        path,
        meta: Meta {
            mode: 0o644,
            ..Meta::default()
        },
        size: 3,
    }));
    s.extend_from_slice(b"abc");
    let at_trailer = s.len();
    FileEnd {
        checksum: 1,
        changed: false,
        unreadable: false,
    }
    .encode(&mut s);
    s.extend(entry(Entry::End {
        entries: 1,
        failed: 0,
    }));
    for threads in [1, 2] {
        let mut u = Unpacker::new(Dest::open(d.path(), true, None).unwrap(), "d", false)
            .with_create_threads(threads);
        u.write_all(&s).unwrap();
        assert!(u.flush().is_err());
        drop(u);
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            0,
            "nothing left ({threads} threads)"
        );
    }
    // Cut before the trailer, a small file held in memory for the workers:
    // nothing at all is left (--resume sends it again whole).
    let mut u =
        Unpacker::new(Dest::open(d.path(), true, None).unwrap(), "d", false).with_create_threads(2);
    u.write_all(&s[..at_trailer]).unwrap();
    assert!(u.flush().is_err());
    drop(u);
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    // Cut before the trailer, a file written as it comes: nothing under the
    // final name; what arrived stays under the temporary name, for --resume.
    let mut u =
        Unpacker::new(Dest::open(d.path(), true, None).unwrap(), "d", false).with_create_threads(1);
    u.write_all(&s[..at_trailer]).unwrap();
    assert!(u.flush().is_err());
    drop(u);
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1);
    assert_eq!(
        crate::names::tmp_target(names[0].as_bytes()),
        Some(&b"f"[..])
    );
}

#[test]
fn resume_sends_only_what_the_destination_lacks() {
    let d = tempfile::tempdir().expect("tempdir");
    tree(d.path());
    let src = d.path().join("src");
    let out = d.path().join("out");
    copy(&src, &out, false).expect("first copy");
    // Lose one file, and cut another short as an interrupted run leaves it.
    std::fs::remove_file(out.join("a.txt")).unwrap();
    let big = std::fs::read(src.join("big.bin")).unwrap();
    std::fs::remove_file(out.join("big.bin")).unwrap();
    std::fs::write(out.join(".big.bin.rdcp-1-1"), &big[..1_000_001]).unwrap();
    let m = listing_of(&out, b"src", d.path());
    let mut buf = Vec::new();
    let stats = pack(
        std::slice::from_ref(&src),
        PackOptions {
            recursive: true,
            xattrs: false,
            specials: false,
            direct: false,
            stripe: None,
        },
        Some(&m),
        &mut buf,
    )
    .unwrap();
    assert_eq!(stats.resumed, 1);
    assert_eq!(
        stats.bytes,
        (big.len() - 1_000_001 + 6) as u64,
        "the rest of big.bin and a.txt"
    );
    let dest = Dest::open(&out, false, Some(b"src")).unwrap();
    let mut u = Unpacker::new(dest, "out", true);
    u.write_all(&buf).unwrap();
    u.flush().unwrap();
    drop(u);
    assert_eq!(std::fs::read(out.join("big.bin")).unwrap(), big);
    assert_eq!(std::fs::read(out.join("a.txt")).unwrap(), b"hello\n");
    assert!(!out.join(".big.bin.rdcp-1-1").exists());
    // A partial copy that does not match the source's start is not continued.
    std::fs::remove_file(out.join("big.bin")).unwrap();
    std::fs::write(out.join(".big.bin.rdcp-1-2"), b"not the start").unwrap();
    let m = listing_of(&out, b"src", d.path());
    let stats = pack(
        &[src],
        PackOptions {
            recursive: true,
            xattrs: false,
            specials: false,
            direct: false,
            stripe: None,
        },
        Some(&m),
        &mut Vec::new(),
    )
    .unwrap();
    assert_eq!((stats.resumed, stats.bytes), (0, big.len() as u64));
}

#[test]
fn checksum_sends_again_a_copy_with_its_size_and_mtime_but_other_bytes() {
    let d = tempfile::tempdir().expect("tempdir");
    tree(d.path());
    let src = d.path().join("src");
    let out = d.path().join("out");
    copy(&src, &out, false).expect("first copy");
    // Damage the copy in the middle; put its mtime back.
    let big = std::fs::read(src.join("big.bin")).unwrap();
    let when = std::fs::metadata(out.join("big.bin"))
        .unwrap()
        .modified()
        .unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(out.join("big.bin"))
            .unwrap();
        f.write_all_at(b"rot", 1_500_000).unwrap();
        f.set_modified(when).unwrap();
    }
    let opts = PackOptions {
        recursive: true,
        xattrs: false,
        specials: false,
        direct: false,
        stripe: None,
    };
    let resend = |checksum: bool| {
        let m = listing_with(&out, b"src", d.path(), checksum);
        let mut buf = Vec::new();
        let stats = pack(std::slice::from_ref(&src), opts, Some(&m), &mut buf).unwrap();
        (stats, buf)
    };
    // Size and mtime alone: nothing is sent.
    let (stats, _) = resend(false);
    assert_eq!(stats.bytes, 0, "{stats:?}");
    // By content: the damaged file alone goes again, and is repaired.
    let (stats, buf) = resend(true);
    assert_eq!(stats.bytes, big.len() as u64, "{stats:?}");
    assert_eq!(
        stats.skipped, 3,
        "a.txt, sparse and the odd name stay: {stats:?}"
    );
    let mut u = Unpacker::new(Dest::open(&out, false, Some(b"src")).unwrap(), "out", true);
    u.write_all(&buf).unwrap();
    u.flush().unwrap();
    drop(u);
    assert_eq!(std::fs::read(out.join("big.bin")).unwrap(), big);
    let (stats, _) = resend(true);
    assert_eq!(stats.bytes, 0, "repaired: {stats:?}");
}

#[test]
fn a_single_file_cut_short_is_continued_beside_its_name() {
    let d = tempfile::tempdir().expect("tempdir");
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(d.path().join("f"), &data).unwrap();
    std::fs::write(d.path().join(".copy.rdcp-7-0"), &data[..777_777]).unwrap();
    let dst = d.path().join("copy");
    let m = listing_of(&dst, b"f", d.path());
    let mut buf = Vec::new();
    let stats = pack(
        &[d.path().join("f")],
        PackOptions {
            recursive: false,
            xattrs: false,
            specials: false,
            direct: false,
            stripe: None,
        },
        Some(&m),
        &mut buf,
    )
    .unwrap();
    assert_eq!(
        (stats.resumed, stats.bytes),
        (1, (data.len() - 777_777) as u64)
    );
    let mut u = Unpacker::new(Dest::open(&dst, false, Some(b"f")).unwrap(), "copy", false);
    u.write_all(&buf).unwrap();
    u.flush().unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), data);
    assert!(!d.path().join(".copy.rdcp-7-0").exists());
}

#[test]
fn an_empty_partial_copy_is_reused_not_left_behind() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(d.path().join("src")).unwrap();
    std::fs::write(d.path().join("src/a"), b"abc").unwrap();
    std::fs::write(d.path().join("src/b"), b"def").unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // An interruption right after `a`'s temporary file was created.
    std::fs::write(out.join(".a.rdcp-1-0"), b"").unwrap();
    let m = listing_of(&out, b"src", d.path());
    let mut buf = Vec::new();
    let stats = pack(
        &[d.path().join("src")],
        PackOptions {
            recursive: true,
            xattrs: false,
            specials: false,
            direct: false,
            stripe: None,
        },
        Some(&m),
        &mut buf,
    )
    .unwrap();
    assert_eq!(stats.resumed, 1);
    let mut u = Unpacker::new(Dest::open(&out, false, Some(b"src")).unwrap(), "out", true);
    u.write_all(&buf).unwrap();
    u.flush().unwrap();
    let mut names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(std::fs::read(out.join("a")).unwrap(), b"abc");
}

/// A POSIX ACL as `setfacl` stores it (`system.posix_acl_access`, version 2):
/// user::rw-, user:UID:r--, group::r--, mask::r--, other::---.
fn acl(uid: u32) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    let undefined = u32::MAX;
    for (tag, perm, id) in [
        (0x01u16, 6u16, undefined),
        (0x02, 4, uid),
        (0x04, 4, undefined),
        (0x10, 4, undefined),
        (0x20, 0, undefined),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn xattrs_and_acls_travel_and_others_do_not() {
    let d = tempfile::tempdir().expect("tempdir");
    tree(d.path());
    let src = d.path().join("src");
    let set = |p: &Path, name: &str, value: &[u8]| {
        rustix::fs::setxattr(p, name, value, rustix::fs::XattrFlags::empty())
    };
    if let Err(e) = set(&src.join("a.txt"), "user.origin", b"lab 3") {
        eprintln!("SKIP: no user xattrs on this file system ({e})");
        return;
    }
    set(&src.join("big.bin"), "user.empty", b"").unwrap();
    set(&src.join("empty"), "user.dir", b"d").unwrap();
    set(&src.join("a.txt"), "system.posix_acl_access", &acl(4242)).unwrap();
    // ext4 keeps at most one block of attributes: a value over 4 KiB may
    // not be settable there (then that part is not checked).
    let huge = set(&src.join("big.bin"), "user.huge", &vec![1u8; 5000]).is_ok();
    let out = d.path().join("out");
    copy(&src, &out, false).expect("copied");
    let get = |p: &Path, name: &str| {
        let mut b = vec![0u8; 8192];
        rustix::fs::getxattr(p, name, &mut b).map(|n| b[..n].to_vec())
    };
    assert_eq!(get(&out.join("a.txt"), "user.origin").unwrap(), b"lab 3");
    assert_eq!(get(&out.join("big.bin"), "user.empty").unwrap(), b"");
    assert_eq!(get(&out.join("empty"), "user.dir").unwrap(), b"d");
    assert_eq!(
        get(&out.join("a.txt"), "system.posix_acl_access").unwrap(),
        acl(4242)
    );
    // Over 4 KiB: skipped with a warning, the file still copied.
    if huge {
        assert!(get(&out.join("big.bin"), "user.huge").is_err());
    }
    // Without --xattrs nothing travels.
    let mut buf = Vec::new();
    pack(
        std::slice::from_ref(&src),
        PackOptions {
            recursive: true,
            xattrs: false,
            specials: false,
            direct: false,
            stripe: None,
        },
        None,
        &mut buf,
    )
    .unwrap();
    let out2 = d.path().join("out2");
    let mut u = Unpacker::new(Dest::open(&out2, false, None).unwrap(), "dst", true);
    u.write_all(&buf).unwrap();
    u.flush().unwrap();
    assert!(get(&out2.join("a.txt"), "user.origin").is_err());
}

/// A FIFO as the destination (as `/dev/null` or a terminal would be): the
/// one file's bytes go into it, in order, and it stays a FIFO; a tree into
/// it is refused.
#[test]
fn a_file_into_a_fifo_is_written_into_it_not_renamed_over_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let src = d.path().join("src");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let fifo = d.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let mut stream = Vec::new();
    let opts = PackOptions {
        recursive: false,
        xattrs: false,
        specials: false,
        direct: false,
        stripe: None,
    };
    pack(&[src], opts, None, &mut stream).unwrap();
    let dest = Dest::open(&fifo, false, None).unwrap();
    assert!(matches!(dest, Dest::Device(_)));
    let mut u = Unpacker::new(dest, "fifo", true);
    for piece in stream.chunks(4000) {
        u.write_all(piece).unwrap();
    }
    u.flush().unwrap();
    assert_eq!(u.stats().bytes, data.len() as u64);
    drop(u);
    assert_eq!(reader.join().unwrap(), data);
    let ft = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&ft));
    assert_eq!(
        std::fs::read_dir(d.path()).unwrap().count(),
        2,
        "no temporaries"
    );

    // A tree cannot go into it.
    std::fs::create_dir(d.path().join("tree")).unwrap();
    let mut stream = Vec::new();
    let opts = PackOptions {
        recursive: true,
        ..opts
    };
    pack(&[d.path().join("tree")], opts, None, &mut stream).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let mut u = Unpacker::new(Dest::open(&fifo, false, None).unwrap(), "fifo", true);
    let e = u.write_all(&stream).unwrap_err().to_string();
    assert!(
        e.contains("fifo is not a directory or a regular file"),
        "{e}"
    );
    drop(u);
    assert!(reader.join().unwrap().is_empty());
}
