//! Adversarial streams and planted symlinks against the receiving side: every
//! test asserts safe behaviour. Those marked "Guards against" name the hole a
//! naive receiver would have and the check that closes it.

use rdpipe_copy::{list, Dest, Unpacker};
use rdpipe_wire::checksum::xxh3_64;
use rdpipe_wire::entry::{encode_start, Entry, FileEnd, Meta, RelPath};
use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn p(s: &[u8]) -> RelPath {
    RelPath::new(s.to_vec()).unwrap()
}
fn m(mode: u32) -> Meta {
    Meta {
        mode,
        ..Meta::default()
    }
}

/// A stream under construction.
struct S(Vec<u8>);
impl S {
    fn new() -> S {
        let mut v = Vec::new();
        encode_start(1, &mut v);
        S(v)
    }
    fn e(&mut self, e: Entry) -> &mut S {
        e.encode(&mut self.0);
        self
    }
    /// Data and a matching trailer.
    fn data(&mut self, data: &[u8]) -> &mut S {
        self.0.extend_from_slice(data);
        let (checksum, changed, unreadable) = (xxh3_64(data), false, false);
        let end = FileEnd {
            checksum,
            changed,
            unreadable,
        };
        end.encode(&mut self.0);
        self
    }
    fn file_m(&mut self, path: &[u8], meta: Meta, data: &[u8]) -> &mut S {
        let (path, size) = (p(path), data.len() as u64);
        self.e(Entry::File { path, meta, size }).data(data)
    }
    fn file(&mut self, path: &[u8], mode: u32, data: &[u8]) -> &mut S {
        self.file_m(path, m(mode), data)
    }
    fn dir(&mut self, path: &[u8], mode: u32) -> &mut S {
        let (path, meta) = (p(path), m(mode));
        self.e(Entry::Dir { path, meta })
    }
    fn link(&mut self, path: &[u8], target: &[u8]) -> &mut S {
        let (path, target) = (p(path), p(target));
        self.e(Entry::HardLink { path, target })
    }
    /// A Resume of `path` from `tmp` holding `prefix`, then `rest`.
    fn resume(&mut self, path: &[u8], tmp: &[u8], prefix: &[u8], rest: &[u8]) -> &mut S {
        let offset = prefix.len() as u64;
        let (size, prefix) = (offset + rest.len() as u64, xxh3_64(prefix));
        let (path, meta, tmp) = (p(path), m(0o644), tmp.to_vec());
        let e = Entry::Resume {
            path,
            meta,
            size,
            offset,
            prefix,
            tmp,
        };
        self.e(e).data(rest)
    }
    fn end(&mut self) -> Vec<u8> {
        let (entries, failed) = (0, 0);
        self.e(Entry::End { entries, failed });
        self.0.clone()
    }
}

fn into(d: &Path) -> Dest {
    Dest::open(d, true, None).unwrap()
}
/// Writes the whole stream then flushes: (write, flush). Small files are
/// created by the pool's workers (the integration tests, on 2 cores, run
/// the decoding thread's path), so the stream's order must hold across
/// threads too.
fn unpack(dest: Dest, s: &[u8], preserve: bool) -> (io::Result<()>, io::Result<()>) {
    let mut u = Unpacker::new(dest, "dst", preserve).with_create_threads(3);
    let w = u.write_all(s);
    let f = if w.is_ok() { u.flush() } else { Ok(()) };
    (w, f)
}
/// Unpacks into `dst`: the stream must be well formed, and the run's verdict
/// must name `failed` files not written (0: success).
fn expect(dst: &Path, s: &[u8], preserve: bool, failed: u32) {
    let (w, f) = unpack(into(dst), s, preserve);
    w.unwrap();
    match failed {
        0 => f.unwrap(),
        n => {
            let e = f.unwrap_err().to_string();
            assert!(e.contains(&format!("{n} not written")), "{e}");
        }
    }
}

/// A root with `dst/` and `outside/secret`.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let (dst, out) = (t.path().join("dst"), t.path().join("outside"));
    fs::create_dir(&dst).unwrap();
    fs::create_dir(&out).unwrap();
    fs::write(out.join("secret"), b"secret").unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o755)).unwrap();
    (t, dst, out)
}
type Stat = (PathBuf, u32, u32, u64, i64, u64, Vec<u8>);
fn stat(path: PathBuf) -> Stat {
    let md = fs::symlink_metadata(&path).unwrap();
    let data = fs::read(&path).unwrap_or_default();
    let (mode, uid, n, t, len) = (md.mode(), md.uid(), md.nlink(), md.mtime(), md.len());
    (path, mode, uid, n, t, len, data)
}
/// Everything observable about `outside` (names, content, inode metadata).
fn snap(out: &Path) -> Vec<Stat> {
    let mut v = vec![stat(out.into())];
    v.extend(fs::read_dir(out).unwrap().map(|e| stat(e.unwrap().path())));
    v.sort();
    v
}
fn names(d: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<_> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    v.sort();
    v
}
fn is_root() -> bool {
    fs::metadata("/proc/self").unwrap().uid() == 0
}

#[test]
fn planted_links_are_replaced_by_name_never_followed() {
    let (_t, dst, out) = setup();
    let before = snap(&out);
    symlink(out.join("secret"), dst.join("evil")).unwrap();
    symlink(&out, dst.join("evildir")).unwrap();
    fs::hard_link(out.join("secret"), dst.join("x")).unwrap();
    symlink(out.join("secret"), dst.join("y")).unwrap();
    let mut meta = m(0o4777);
    (meta.uid, meta.gid, meta.mtime) = (4242, 4242, 1);
    let s = S::new()
        .link(b"h", b"evil") // linkat without AT_SYMLINK_FOLLOW
        .link(b"h2", b"evildir/secret") // through a symlinked directory
        .file_m(b"x", meta, b"new") // over a hard link to outside
        .file_m(b"y", meta, b"new") // over a symlink to outside
        .end();
    expect(&dst, &s, true, 1);
    assert!(fs::symlink_metadata(dst.join("h")).unwrap().is_symlink());
    assert!(fs::symlink_metadata(dst.join("h2")).is_err());
    assert_eq!(fs::read(dst.join("x")).unwrap(), b"new");
    assert!(fs::symlink_metadata(dst.join("y")).unwrap().is_file());
    assert_eq!(snap(&out), before, "outside untouched, nlink back to 1");
}

#[test]
fn resume_refuses_symlinked_hard_linked_foreign_short_or_fifo_partials() {
    let (_t, dst, out) = setup();
    symlink(out.join("secret"), dst.join(".a.rdcp-1-1")).unwrap();
    fs::hard_link(out.join("secret"), dst.join(".b.rdcp-1-1")).unwrap();
    fs::write(dst.join(".c.rdcp-1-1"), b"sec").unwrap();
    fs::write(dst.join(".d.rdcp-1-1"), b"se").unwrap();
    let mkfifo = std::process::Command::new("mkfifo")
        .arg(dst.join(".e.rdcp-1-1"))
        .status();
    assert!(mkfifo.unwrap().success());
    let before = snap(&out);
    let s = S::new()
        .resume(b"a", b".a.rdcp-1-1", b"sec", b"PWNED") // a symlink
        .resume(b"b", b".b.rdcp-1-1", b"sec", b"PWNED") // a hard link
        .resume(b"z", b".c.rdcp-1-1", b"sec", b"PWNED") // another file's
        .resume(b"d", b".d.rdcp-1-1", b"sec", b"PWNED") // shorter than offset
        .resume(b"e", b".e.rdcp-1-1", b"", b"PWNED") // a FIFO: no hang
        .end();
    expect(&dst, &s, false, 4);
    for n in ["a", "b", "z", "d"] {
        assert!(fs::symlink_metadata(dst.join(n)).is_err(), "{n}");
    }
    // Reused from its start (offset 0), a partial that cannot be is left
    // alone and the file written anew: the FIFO is neither opened nor
    // replaced.
    assert_eq!(fs::read(dst.join("e")).unwrap(), b"PWNED");
    assert!(fs::symlink_metadata(dst.join(".e.rdcp-1-1"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(fs::read(dst.join(".c.rdcp-1-1")).unwrap(), b"sec");
    assert_eq!(snap(&out), before);
}

/// Guards against: a partial copy planted (or held open for writing) by
/// another user being continued and published with bytes changed after the
/// prefix check, still owned by the planter (unpack/resume.rs
/// `reopen_partial` checks the owner and the write bits, not only nlink and
/// the prefix).
#[test]
fn resume_does_not_publish_a_partial_copy_another_user_controls() {
    if !is_root() {
        return;
    }
    let (_t, dst, _out) = setup();
    let tmp = dst.join(".f.rdcp-9-9");
    let prefix = vec![b'1'; 8192]; // two blocks: the first is not rewritten
    fs::write(&tmp, &prefix).unwrap();
    std::os::unix::fs::chown(&tmp, Some(65534), Some(65534)).unwrap();
    let attacker = fs::OpenOptions::new().write(true).open(&tmp).unwrap();
    let s = S::new()
        .resume(b"f", b".f.rdcp-9-9", &prefix, b"5678")
        .end();
    let cut = s.len() - 17 - 9 - 4; // after the Resume header
    let mut u = Unpacker::new(into(&dst), "dst", false);
    u.write_all(&s[..cut]).unwrap();
    attacker.write_all_at(b"EVIL", 0).unwrap(); // after the prefix check
    u.write_all(&s[cut..]).unwrap();
    let _ = u.flush();
    if let Ok(md) = fs::metadata(dst.join("f")) {
        let got = fs::read(dst.join("f")).unwrap();
        let head = String::from_utf8_lossy(&got[..8]).into_owned();
        assert!(
            got == [&prefix[..], b"5678"].concat(),
            "published {head}..."
        );
        assert_eq!(md.uid(), 0, "published file still owned by the planter");
    }
}

#[test]
fn dir_entries_on_planted_symlinks_are_refused_and_never_chmodded() {
    let (_t, dst, out) = setup();
    symlink(&out, dst.join("d")).unwrap();
    let before = snap(&out);
    let s = S::new()
        .dir(b"d", 0o7777)
        .dir(b"d/sub", 0o777)
        .file(b"d/x", 0o777, b"x")
        .link(b"d/y", b"d/secret")
        .end();
    expect(&dst, &s, true, 4);
    assert_eq!(snap(&out), before);
}

#[test]
fn a_symlink_the_stream_made_is_not_followed_by_later_entries() {
    let (_t, dst, out) = setup();
    let before = snap(&out);
    let (path, meta) = (p(b"a"), m(0o777));
    let target = out.as_os_str().as_bytes().to_vec();
    let s = S::new()
        .e(Entry::Symlink { path, meta, target })
        .file(b"a/x", 0o644, b"x")
        .dir(b"a", 0o777)
        .dir(b"a/y", 0o777)
        .link(b"a/z", b"a/secret")
        .resume(b"a/secret", b".secret.rdcp-1-1", b"", b"x")
        .end();
    expect(&dst, &s, true, 5);
    assert!(fs::symlink_metadata(dst.join("a")).unwrap().is_symlink());
    assert_eq!(snap(&out), before);
}

#[test]
fn a_path_sent_as_dir_and_file_in_either_order() {
    let (_t, dst, _out) = setup();
    let s = S::new()
        .dir(b"x", 0o755)
        .file(b"x", 0o644, b"1")
        .file(b"y", 0o644, b"2")
        .dir(b"y", 0o755)
        .file(b"y/z", 0o644, b"3")
        .file(b"y", 0o644, b"4")
        .end();
    expect(&dst, &s, false, 3);
    assert!(dst.join("x").is_dir());
    assert_eq!(fs::read(dst.join("y")).unwrap(), b"4");
    assert_eq!(names(&dst), [b"x", b"y"], "no temporaries");
}

#[test]
fn malformed_streams_and_a_second_top_level_entry_are_errors() {
    let (t, dst, _out) = setup();
    // Bytes after the end entry; a resume offset past the size.
    let mut s = S::new().end();
    s.extend(S::new().file(b"late", 0o644, b"x").end().split_off(12));
    assert!(unpack(into(&dst), &s, false).0.is_err());
    let mut s = S::new().resume(b"c", b".c.rdcp-1-1", b"abc", b"").0.clone();
    s[12 + 1 + 3 + 24 + 7] = 2; // size: 3 -> 2, below the offset
    assert!(unpack(into(&dst), &s, false).0.is_err());
    assert!(names(&dst).is_empty());
    // Dest::As takes one top-level entry only.
    let (new, new2) = (t.path().join("new"), t.path().join("new2"));
    let s = S::new()
        .file(b"a", 0o644, b"1")
        .file(b"b", 0o644, b"2")
        .end();
    let (w, _) = unpack(Dest::open(&new, false, None).unwrap(), &s, false);
    assert!(w.is_err());
    assert_eq!(fs::read(&new).unwrap(), b"1");
    let s = S::new().dir(b"a", 0o755).link(b"a/l", b"b").end();
    let (w, _) = unpack(Dest::open(&new2, false, None).unwrap(), &s, false);
    assert!(w.is_err());
    assert_eq!(names(t.path()), [&b"dst"[..], b"new", b"new2", b"outside"]);
}

#[test]
fn long_deep_and_newline_names() {
    let (_t, dst, _out) = setup();
    let (n255, n256) = (vec![b'n'; 255], vec![b'm'; 256]);
    let deep = [&b"abcdefg/".repeat(511)[..], b"endendee"].concat();
    assert_eq!(deep.len(), 4096, "PATH_MAX");
    let s = S::new()
        .file(&n255, 0o644, b"ok")
        .file(&n256, 0o644, b"too long")
        .file(&deep, 0o644, b"deep")
        .dir(b"new\nline", 0o755)
        .file(b"new\nline/\n\xff", 0o644, b"nl")
        .end();
    expect(&dst, &s, false, 1);
    assert_eq!(fs::read(dst.join(OsStr::from_bytes(&n255))).unwrap(), b"ok");
    let nl = dst.join(OsStr::from_bytes(b"new\nline/\n\xff"));
    assert_eq!(fs::read(nl).unwrap(), b"nl");
    use rustix::fs::{openat, Mode, OFlags};
    let mut at = rustix::fs::open(&dst, OFlags::RDONLY, Mode::empty()).unwrap();
    for c in deep.split(|&b| b == b'/') {
        at = openat(&at, OsStr::from_bytes(c), OFlags::RDONLY, Mode::empty()).unwrap();
    }
    let mut got = String::new();
    io::Read::read_to_string(&mut fs::File::from(at), &mut got).unwrap();
    assert_eq!(got, "deep");
    assert!(names(&dst).iter().all(|n| !n.starts_with(b".")));
}

#[test]
fn preserve_with_hostile_modes_and_times() {
    let (_t, dst, out) = setup();
    let before = snap(&out);
    let (mut early, mut late) = (m(0o644), m(0o644));
    (early.mtime, early.mtime_ns, late.mtime) = (i64::MIN, 999_999_999, i64::MAX);
    let s = S::new()
        .dir(b"locked", 0o000)
        .file(b"locked/in", 0o000, b"in")
        .dir(b"sticky", 0o7777)
        .file(b"suid", 0o6755, b"#!") // uid 0
        .file_m(b"early", early, b"t")
        .file_m(b"late", late, b"t")
        .end();
    let (w, _f) = unpack(into(&dst), &s, true); // the times may fail: no panic
    w.unwrap();
    let md = |n: &str| fs::metadata(dst.join(n)).unwrap().mode() & 0o7777;
    assert_eq!(md("locked"), 0o000);
    assert_eq!(md("sticky"), 0o7777);
    if is_root() {
        assert_eq!(fs::read(dst.join("locked/in")).unwrap(), b"in");
        assert_eq!(md("suid"), 0o6755, "kept, as cp -p does (by design)");
    }
    assert_eq!(snap(&out), before);
    // Without preserve, special bits are dropped.
    let (_t2, dst2, _) = setup();
    let s = S::new().file(b"suid", 0o6777, b"#!").end();
    expect(&dst2, &s, false, 0);
    assert_eq!(fs::metadata(dst2.join("suid")).unwrap().mode() & 0o7000, 0);
}

#[test]
fn a_huge_declared_size_without_its_data_publishes_nothing() {
    let (_t, dst, _out) = setup();
    let (path, meta, size) = (p(b"big"), m(0o644), u64::MAX);
    let mut u = Unpacker::new(into(&dst), "dst", false);
    u.write_all(&S::new().e(Entry::File { path, meta, size }).0)
        .unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        u.write_all(&zeros).unwrap();
    }
    assert!(u.flush().is_err());
    drop(u);
    assert!(fs::symlink_metadata(dst.join("big")).is_err());
    let n = names(&dst);
    assert_eq!(n.len(), 1, "only the temporary, kept for --resume");
    let tmp = fs::metadata(dst.join(OsStr::from_bytes(&n[0]))).unwrap();
    assert!(tmp.blocks() < 64, "zeros left as holes");
}

#[test]
fn one_byte_writes_are_fine() {
    let (_t, dst, _out) = setup();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut s = S::new();
    for i in 0..3 {
        s.file(format!("f{i}").as_bytes(), 0o644, &data);
    }
    let parent = vec![vec![b'l'; 250]; 15].join(&b'/');
    for i in 0..100 {
        let path = format!("{}/{i:0>250}", parent.escape_ascii());
        s.link(path.as_bytes(), b"f0");
    }
    let s = s.end();
    let t0 = std::time::Instant::now();
    let mut u = Unpacker::new(into(&dst), "dst", false);
    for b in s.chunks(1) {
        u.write_all(b).unwrap();
    }
    u.flush().unwrap();
    assert!(t0.elapsed().as_secs() < 20, "{:?}", t0.elapsed());
    assert_eq!(fs::read(dst.join("f2")).unwrap(), data);
}

fn rss_kib() -> u64 {
    let st = fs::read_to_string("/proc/self/status").unwrap();
    let l = st.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Guards against: a sender exhausting memory by sending the same Dir entry
/// again and again (unpack.rs keeps one entry per directory path).
#[test]
fn repeated_dir_entries_do_not_grow_memory() {
    let (_t, dst, _out) = setup();
    let path = vec![vec![b'd'; 249]; 16].join(&b'/');
    let one = S::new().dir(&path, 0o755).0.split_off(12);
    let mut u = Unpacker::new(into(&dst), "dst", false);
    u.write_all(&S::new().0).unwrap();
    let chunk = one.repeat(256);
    let before = rss_kib();
    for _ in 0..200 {
        u.write_all(&chunk).unwrap(); // 51,200 entries, 200 MiB in all
    }
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 64 << 10, "RSS grew by {grown} KiB");
}

/// Guards against (minor, inside the destination): a temporary name left
/// behind when a link is renamed over another link to the same inode (which
/// rename(2) does as a no-op); `publish` removes the temporary name.
#[test]
fn a_repeated_hard_link_leaves_no_temporary() {
    let (_t, dst, _out) = setup();
    let s = S::new()
        .file(b"a", 0o644, b"a")
        .link(b"b", b"a")
        .link(b"b", b"a")
        .link(b"a", b"a")
        .end();
    expect(&dst, &s, false, 0);
    assert_eq!(names(&dst), [b"a", b"b"]);
}

/// Guards against: the resume listing following a directory swapped for a
/// symlink while it runs (another local user can time it): listing, hashing
/// or removing `.NAME.rdcp-*` files outside the destination. `list` walks by
/// directory descriptors opened without following links.
#[test]
fn the_listing_does_not_delete_through_a_swapped_symlink() {
    use rustix::fs::{inotify, RenameFlags, CWD};
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
    let plant = move |d: &Path| {
        fs::write(d.join(".leak.rdcp-1-1"), b"the largest").unwrap();
        let f = fs::File::create(d.join(".leak.rdcp-1-2")).unwrap();
        f.set_modified(old).unwrap(); // an older, smaller partial copy
    };
    let mut deleted = false;
    for _ in 0..4 {
        let (t, dst, out) = setup();
        let (sub, lnk) = (dst.join("top/sub"), t.path().join("lnk"));
        fs::create_dir_all(&sub).unwrap();
        plant(&out);
        plant(&sub);
        symlink(&out, &lnk).unwrap();
        for i in 0..8 {
            // Other partial copies, slow to hash: the walk's results wait.
            let big = fs::File::create(dst.join(format!("top/.big{i}.rdcp-1-1"))).unwrap();
            big.set_len(64 << 20).unwrap();
        }
        let ino = inotify::init(inotify::CreateFlags::CLOEXEC).unwrap();
        inotify::add_watch(&ino, &sub, inotify::WatchFlags::CLOSE_NOWRITE).unwrap();
        let swap = std::thread::spawn(move || {
            rustix::io::read(&ino, &mut [0; 4096]).unwrap(); // the walk read `sub`
            rustix::fs::renameat_with(CWD, &sub, CWD, &lnk, RenameFlags::EXCHANGE).unwrap();
        });
        list::list(&dst, true, &[b"top".to_vec()], false, &mut Vec::new()).unwrap();
        swap.join().unwrap();
        deleted = !out.join(".leak.rdcp-1-2").exists();
        if deleted {
            break;
        }
    }
    assert!(
        !deleted,
        "the listing deleted a file outside the destination"
    );
}

/// Extended attributes a sender may not hand out (file capabilities, SELinux
/// labels, root's trusted.*), too many for one entry, or before an entry
/// that has none: the stream is refused, and no file gets them.
#[test]
fn forbidden_or_misplaced_extended_attributes_are_refused() {
    let x = |name: &[u8]| Entry::Xattr {
        name: name.to_vec(),
        value: b"\x01\x00\x00\x02".to_vec(),
    };
    for name in [
        b"security.capability".as_slice(),
        b"security.selinux",
        b"trusted.overlay.opaque",
    ] {
        let (_t, dst, _) = setup();
        let s = S::new().e(x(name)).file(b"f", 0o755, b"#!/bin/sh\n").end();
        let (w, _) = unpack(into(&dst), &s, true);
        assert!(w.is_err(), "{}", String::from_utf8_lossy(name));
        assert!(!dst.join("f").exists());
    }
    let (_t, dst, _) = setup();
    let mut s = S::new();
    for i in 0..=rdpipe_copy::xattr::MAX_PER_ENTRY {
        s.e(x(format!("user.a{i}").as_bytes()));
    }
    let s = s.file(b"f", 0o644, b"x").end();
    assert!(unpack(into(&dst), &s, true).0.is_err());
    let (_t, dst, _) = setup();
    let s = S::new()
        .file(b"f", 0o644, b"x")
        .e(x(b"user.a"))
        .link(b"g", b"f")
        .end();
    assert!(unpack(into(&dst), &s, true).0.is_err());
    let (_t, dst, _) = setup();
    let s = S::new().file(b"f", 0o644, b"x").e(x(b"user.a")).end();
    let (w, f) = unpack(into(&dst), &s, true);
    assert!(w.is_err() || f.is_err());
}
