//! A mirror (`rdcp --delete`, [`rdpipe_copy::mirror`]) from the packer to
//! the unpacker, without a transfer between them: DEST becomes the source's
//! copy, what the source lacks goes (links as links, nothing outside DEST,
//! rdcp's own temporaries kept), unchanged files are named and not sent, a
//! dry run changes nothing, a failed copy removes nothing.

use rdpipe_copy::mirror::Mirror;
use rdpipe_copy::pack::{pack_mirror_to, Writing};
use rdpipe_copy::unpack::UnpackStats;
use rdpipe_copy::{list_mirror, Dest, Manifest, PackOptions, PackStats, Unpacker};
use std::io::Write;
use std::path::{Path, PathBuf};

const OPTS: PackOptions = PackOptions {
    recursive: true,
    xattrs: false,
    specials: false,
    direct: false,
    stripe: None,
};

/// Mirrors `sources` onto `dst` (with the listing of `dst` first when
/// `resume`): the two sides' counts and the unpacker's verdict.
fn mirror_onto(
    sources: &[PathBuf],
    dst: &Path,
    m: Mirror,
    resume: bool,
) -> (PackStats, UnpackStats, std::io::Result<()>) {
    let manifest = resume.then(|| {
        let mut listing = Vec::new();
        list_mirror(dst, false, &mut listing).unwrap();
        let at = dst.with_extension("listing");
        std::fs::write(&at, listing).unwrap();
        Manifest::read(&at).unwrap()
    });
    let mut stream = Vec::new();
    let p = pack_mirror_to(
        sources,
        OPTS,
        manifest.as_ref(),
        Some(m),
        &mut Writing::new(&mut stream),
    )
    .unwrap();
    let dest = Dest::mirror(dst, &m).unwrap();
    let mut u = Unpacker::new(dest, &dst.to_string_lossy(), true)
        .with_create_threads(1)
        .with_mirror(m, String::new());
    u.write_all(&stream).unwrap();
    let r = u.flush();
    (p, u.stats(), r)
}

fn names(d: &Path) -> Vec<String> {
    let out = std::process::Command::new("find")
        .arg(".")
        .current_dir(d)
        .output()
        .unwrap();
    let mut v: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

fn source(d: &Path) -> PathBuf {
    let src = d.join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    std::fs::write(src.join("sub/b"), b"bb").unwrap();
    std::fs::write(src.join("sub/deeper/c"), b"ccc").unwrap();
    std::os::unix::fs::symlink("../a", src.join("sub/to-a")).unwrap();
    src
}

#[test]
fn the_mirror_is_dest_itself_and_loses_what_the_source_lacks() {
    let d = tempfile::tempdir().unwrap();
    let src = source(d.path());
    let dst = d.path().join("dst");
    let outside = d.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("victim"), b"keep me").unwrap();
    // First run: DEST does not exist and becomes the copy.
    let (_, u, r) = mirror_onto(std::slice::from_ref(&src), &dst, Mirror::default(), false);
    r.unwrap();
    assert_eq!(u.deleted, 0);
    assert_eq!(names(&src), names(&dst));
    // Extraneous entries: a file, a tree, links out of DEST (to a file and
    // to a directory), one in place of a directory the source has not; and
    // a partial copy of rdcp's own, which stays.
    std::fs::write(dst.join("extra"), b"x").unwrap();
    std::fs::create_dir_all(dst.join("old/deep")).unwrap();
    std::fs::write(dst.join("old/deep/f"), b"f").unwrap();
    std::os::unix::fs::symlink(outside.join("victim"), dst.join("sub/out-file")).unwrap();
    std::os::unix::fs::symlink(&outside, dst.join("out-dir")).unwrap();
    std::fs::write(dst.join("sub/.b.rdcp-1-2"), b"partial").unwrap();
    std::fs::write(src.join("sub/b"), b"changed").unwrap();
    // Second run, into the existing DEST: never DEST/src.
    let (p, u, r) = mirror_onto(std::slice::from_ref(&src), &dst, Mirror::default(), true);
    r.unwrap();
    // The unchanged files were named, not sent; the changed one was sent.
    assert_eq!((p.skipped, p.bytes), (2, 7), "{p:?}");
    // extra, old, old/deep, old/deep/f, sub/out-file, out-dir.
    assert_eq!(u.deleted, 6, "{u:?}");
    // The partial copy of the changed file was reused (written from its
    // start) and renamed into place: no temporary is left.
    assert_eq!(names(&dst), names(&src));
    assert_eq!(std::fs::read(dst.join("sub/b")).unwrap(), b"changed");
    // The links' targets are untouched.
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep me");
    assert_eq!(names(&outside), vec![".", "./victim"]);
}

#[test]
fn a_dry_run_changes_nothing_and_counts_what_would_go() {
    let d = tempfile::tempdir().unwrap();
    let src = source(d.path());
    let dst = d.path().join("dst");
    std::fs::create_dir_all(dst.join("gone/x")).unwrap();
    std::fs::write(dst.join("a"), b"other").unwrap();
    let before = names(&dst);
    let dry = Mirror {
        dry_run: true,
        ..Mirror::default()
    };
    let (p, u, r) = mirror_onto(std::slice::from_ref(&src), &dst, dry, false);
    r.unwrap();
    assert_eq!((p.entries, p.bytes), (0, 0), "names only: {p:?}");
    assert_eq!((u.deleted, u.created, u.bytes), (2, 0, 0), "{u:?}");
    assert_eq!(names(&dst), before);
    assert_eq!(std::fs::read(dst.join("a")).unwrap(), b"other");
}

#[test]
fn a_copy_that_failed_removes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = source(d.path());
    let dst = d.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join("extra"), b"x").unwrap();
    // A directory where the source has the file `a`: `a` is not written.
    std::fs::create_dir_all(dst.join("a/inner")).unwrap();
    let (p, u, r) = mirror_onto(std::slice::from_ref(&src), &dst, Mirror::default(), false);
    assert_eq!(p.failed, 0);
    let e = r.expect_err("the copy failed");
    assert!(e.to_string().contains("not all copied"), "{e}");
    assert_eq!(u.deleted, 0);
    assert!(dst.join("extra").exists() && dst.join("a/inner").is_dir());
    // What could be copied was.
    assert_eq!(std::fs::read(dst.join("sub/b")).unwrap(), b"bb");
}

#[test]
fn a_stream_cut_short_removes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = source(d.path());
    let dst = d.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join("extra"), b"x").unwrap();
    let mut stream = Vec::new();
    let m = Mirror::default();
    pack_mirror_to(
        std::slice::from_ref(&src),
        OPTS,
        None,
        Some(m),
        &mut Writing::new(&mut stream),
    )
    .unwrap();
    // All but the end entry (tag, two counts).
    let mut u = Unpacker::new(Dest::mirror(&dst, &m).unwrap(), "dst", true)
        .with_create_threads(1)
        .with_mirror(m, String::new());
    u.write_all(&stream[..stream.len() - 17]).unwrap();
    assert!(u.flush().is_err());
    drop(u);
    assert!(dst.join("extra").exists());
    assert_eq!(std::fs::read(dst.join("sub/b")).unwrap(), b"bb");
}
