//! `rdcp --streams N` without the network: N packs of one tree, each
//! unpacked on a thread of its own into one destination, as N agents do.
//! The copy is whole and leaves nothing behind; a stream that dies leaves
//! its files unpublished under their temporary names, and `--resume` sends
//! only the pieces they lack.

use rdpipe_copy::stripe::{Stripe, STRIPE_MIN};
use rdpipe_copy::{list, pack, Dest, Manifest, PackOptions, Unpacker};
use rdpipe_wire::entry::PIECE_SIZE;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn opts(stripe: Option<Stripe>) -> PackOptions {
    PackOptions {
        recursive: true,
        xattrs: false,
        specials: false,
        direct: false,
        stripe,
    }
}

fn data(n: u64, k: u64) -> Vec<u8> {
    (0..n).map(|i| (i * k + i / 4093) as u8).collect()
}

fn tree(d: &Path) -> PathBuf {
    let src = d.join("src");
    std::fs::create_dir_all(src.join("sub/empty")).unwrap();
    // Three pieces, the last one short, with a hole in the middle one.
    let mut big = data(2 * PIECE_SIZE + 12345, 7);
    big[(PIECE_SIZE + 4096) as usize..(PIECE_SIZE + 3 * 4096) as usize].fill(0);
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::set_permissions(src.join("big"), std::fs::Permissions::from_mode(0o640)).unwrap();
    // Exactly two pieces, in a subdirectory.
    std::fs::write(src.join("sub/edge"), data(STRIPE_MIN, 11)).unwrap();
    // Big but with two names: whole, on the first stream.
    std::fs::write(src.join("linked"), data(STRIPE_MIN + 1, 13)).unwrap();
    std::fs::hard_link(src.join("linked"), src.join("sub/linked2")).unwrap();
    std::fs::write(src.join("sub/small"), b"small").unwrap();
    std::os::unix::fs::symlink("big", src.join("link")).unwrap();
    std::fs::set_permissions(src.join("sub"), std::fs::Permissions::from_mode(0o750)).unwrap();
    src
}

fn streams(src: &Path, n: u32, run: u64, manifest: Option<&Manifest>) -> Vec<Vec<u8>> {
    (0..n)
        .map(|index| {
            let s = Stripe {
                index,
                count: n,
                run,
            };
            let mut out = Vec::new();
            pack(&[src.to_path_buf()], opts(Some(s)), manifest, &mut out).unwrap();
            out
        })
        .collect()
}

/// Unpacks each stream on a thread (the first `cut` bytes only for the
/// streams `cut` names, then dropped as by a lost transfer); each
/// stream's verdict.
fn unpack(
    dst: &Path,
    n: u32,
    run: u64,
    streams: Vec<Vec<u8>>,
    cut: &[(u32, usize)],
) -> Vec<Result<(), String>> {
    let handles: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(k, bytes)| {
            let dst = dst.to_path_buf();
            let cut = cut.iter().find(|c| c.0 == k as u32).map(|c| c.1);
            std::thread::spawn(move || {
                let s = Stripe {
                    index: k as u32,
                    count: n,
                    run,
                };
                let (d, marker) = Dest::open_stream(&dst, true, None, &s).unwrap();
                let mut u = Unpacker::new(d, "dst", true).with_stripe(s, marker);
                match cut {
                    Some(c) => {
                        u.write_all(&bytes[..c]).map_err(|e| e.to_string())?;
                        Err("cut".to_string())
                    }
                    None => {
                        for part in bytes.chunks(1 << 20) {
                            u.write_all(part).map_err(|e| e.to_string())?;
                        }
                        u.flush().map_err(|e| e.to_string())
                    }
                }
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn same_tree(a: &Path, b: &Path) {
    for e in walk(a) {
        let rel = e.strip_prefix(a).unwrap();
        let (ma, mb) = (
            std::fs::symlink_metadata(&e).unwrap(),
            std::fs::symlink_metadata(b.join(rel)).unwrap(),
        );
        assert_eq!(ma.mode(), mb.mode(), "{rel:?}");
        if ma.is_file() {
            assert_eq!(
                std::fs::read(&e).unwrap(),
                std::fs::read(b.join(rel)).unwrap(),
                "{rel:?}"
            );
            assert_eq!(ma.mtime(), mb.mtime(), "{rel:?}");
        }
    }
    assert_eq!(walk(a).len(), walk(b).len(), "the same names, nothing more");
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut v = vec![];
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap().path();
        if std::fs::symlink_metadata(&e).unwrap().is_dir() {
            v.extend(walk(&e));
        }
        v.push(e);
    }
    v
}

#[test]
fn three_streams_copy_a_tree_whole_and_leave_nothing_behind() {
    let d = tempfile::tempdir().unwrap();
    let src = tree(d.path());
    // Two long names sharing their first 200 bytes: two temporary files.
    for (k, end) in [(21, "a"), (22, "b")] {
        let n = format!("{}{end}", "n".repeat(240));
        std::fs::write(src.join("sub").join(n), data(STRIPE_MIN, k)).unwrap();
    }
    let dst = d.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let s = streams(&src, 3, 0xabc, None);
    // The second and third streams carry pieces only: piece 1 of both
    // striped files, and the short piece 2 of the first.
    let len = |k: usize| s[k].len() as u64;
    assert!(len(1) >= 4 * PIECE_SIZE && len(1) < 4 * PIECE_SIZE + 4096);
    assert!(len(2) > 12345 && len(2) < 12345 + 4096);
    for r in unpack(&dst, 3, 0xabc, s, &[]) {
        r.unwrap();
    }
    same_tree(&src, &dst.join("src"));
    assert_eq!(
        std::fs::metadata(dst.join("src/linked")).unwrap().ino(),
        std::fs::metadata(dst.join("src/sub/linked2"))
            .unwrap()
            .ino()
    );
    // The hole stayed a hole.
    let big = std::fs::metadata(dst.join("src/big")).unwrap();
    assert!(big.blocks() * 512 < big.len());
    // No temporary file, ledger or marker.
    assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 1);
}

/// A copy of [`tree`] by two streams (run 1) whose second stream dies in
/// the middle of the first piece it carries: the source, the destination,
/// and each stream's verdict.
fn interrupted(d: &Path) -> (PathBuf, PathBuf, Vec<Result<(), String>>) {
    let src = tree(d);
    let dst = d.join("dst");
    std::fs::create_dir(&dst).unwrap();
    let s = streams(&src, 2, 0x1, None);
    let cut = s[1].len() / 4;
    let r = unpack(&dst, 2, 0x1, s, &[(1, cut)]);
    (src, dst, r)
}

/// `rdcp --resume`'s listing of `dst`, read back as the sending side does.
fn listed(d: &Path, dst: &Path) -> Manifest {
    let mut listing = Vec::new();
    list(dst, true, &[b"src".to_vec()], false, &mut listing).unwrap();
    let lpath = d.join("listing");
    std::fs::write(&lpath, &listing).unwrap();
    Manifest::read(&lpath).unwrap()
}

/// The striped temporary files and ledgers in `dir`.
fn striped_tmps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".rdcp-s"))
        .collect()
}

#[test]
fn a_stream_that_dies_leaves_its_files_unpublished_and_resume_sends_what_they_lack() {
    let d = tempfile::tempdir().unwrap();
    let (src, dst, r) = interrupted(d.path());
    let first = r[0].as_ref().unwrap_err();
    assert!(first.contains("not all copied"), "{first}");
    // Stream 1 carried the second piece of each striped file and died in
    // the middle of them: neither striped file is there under its name,
    // the rest of the tree is.
    assert!(!dst.join("src/big").exists() && !dst.join("src/sub/edge").exists());
    assert_eq!(std::fs::read(dst.join("src/sub/small")).unwrap(), b"small");
    let tmps = striped_tmps(&dst.join("src"));
    assert_eq!(tmps.len(), 2, "the temporary file and its ledger: {tmps:?}");

    // --resume, with another number of streams: only the missing pieces.
    let m = listed(d.path(), &dst);
    let s = streams(&src, 3, 0x2, Some(&m));
    let sent: usize = s.iter().map(Vec::len).sum();
    assert!(
        (sent as u64) < 2 * PIECE_SIZE + (1 << 16),
        "{sent} bytes sent again: at most the two pieces the dead stream lacked"
    );
    for r in unpack(&dst, 3, 0x2, s, &[]) {
        r.unwrap();
    }
    same_tree(&src, &dst.join("src"));
    assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 1);

    // Resumed again: everything is complete; no file data at all.
    let m = listed(d.path(), &dst);
    let s = streams(&src, 2, 0x3, Some(&m));
    assert!(
        s.iter().all(|b| b.len() < 4096),
        "{:?}",
        s.iter().map(Vec::len).collect::<Vec<_>>()
    );
    for r in unpack(&dst, 2, 0x3, s, &[]) {
        r.unwrap();
    }
    same_tree(&src, &dst.join("src"));
}

/// An interrupted striped copy of a file that then changed: `--resume`
/// sends the new version whole under a new temporary name, and once it is
/// published the old version's temporary file and ledger go with it.
#[test]
fn a_resume_after_the_file_changed_leaves_no_old_striped_copy() {
    let d = tempfile::tempdir().unwrap();
    let (src, dst, _) = interrupted(d.path());
    assert_eq!(striped_tmps(&dst.join("src")).len(), 2);
    // Another version of `big`: other bytes, another mtime.
    std::fs::write(src.join("big"), data(2 * PIECE_SIZE + 999, 5)).unwrap();
    let t = std::fs::File::options()
        .write(true)
        .open(src.join("big"))
        .unwrap();
    t.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30))
        .unwrap();
    drop(t);

    let m = listed(d.path(), &dst);
    let s = streams(&src, 2, 0x2, Some(&m));
    for r in unpack(&dst, 2, 0x2, s, &[]) {
        r.unwrap();
    }
    // The tree equals the source: no old temporary file or ledger beside it.
    same_tree(&src, &dst.join("src"));
    assert_eq!(striped_tmps(&dst.join("src")), Vec::<String>::new());
    assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 1);
}

#[test]
fn a_piece_past_a_symlink_or_under_a_foreign_name_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let src = tree(d.path());
    let dst = d.path().join("dst");
    let outside = d.path().join("outside");
    std::fs::create_dir_all(dst.join("src")).unwrap();
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, dst.join("src/sub")).unwrap();
    let s = streams(&src, 2, 0x3, None);
    let r = unpack(&dst, 2, 0x3, s, &[]);
    assert!(r[0].is_err());
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written through the link"
    );
}
