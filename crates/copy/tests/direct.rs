//! `rdcp --direct`: big files read and written with `O_DIRECT` come out
//! byte-exact with their holes, however the stream is cut into pieces; a
//! stream cut part way leaves its partial copy holding every byte that
//! arrived (what `--resume` continues from). On a filesystem that refuses
//! `O_DIRECT` the same holds through the page cache. (That the page cache is
//! really passed by is checked through the binaries, in
//! tests/integration/rdcp.rs.)

use rdpipe_copy::{pack, Dest, PackOptions, Unpacker};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const OPTS: PackOptions = PackOptions {
    recursive: true,
    xattrs: false,
    specials: false,
    direct: true,
    stripe: None,
};

/// 3 MiB of data, a 1 MiB hole, 2 MiB and an unaligned tail.
fn big() -> Vec<u8> {
    let mut v: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i * 13 + i / 4099) as u8 | 1)
        .collect();
    v.extend(std::iter::repeat_n(0, 1 << 20));
    v.extend((0..(2u32 << 20) + 777).map(|i| (i * 7) as u8 | 1));
    v
}

fn sources(d: &Path) -> std::path::PathBuf {
    let src = d.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("big"), big()).unwrap();
    std::fs::write(src.join("small"), b"small").unwrap();
    src
}

/// Test directories on a disk-backed filesystem where there is one.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

#[test]
fn direct_copies_are_byte_exact_with_their_holes_in_any_pieces() {
    direct_copies_in(scratch());
    // tmpfs: O_DIRECT refused (older kernels) or taken; the same either way.
    if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
        direct_copies_in(shm);
    }
}

fn direct_copies_in(d: tempfile::TempDir) {
    let src = sources(d.path());
    let mut stream = Vec::new();
    pack(std::slice::from_ref(&src), OPTS, None, &mut stream).unwrap();
    for (k, piece) in [4096usize, 333, 1 << 20, 65_537].into_iter().enumerate() {
        let dst = d.path().join(format!("dst{k}"));
        let dest = Dest::open(&dst, false, None).unwrap();
        let mut u = Unpacker::new(dest, "dst", true).with_direct(true);
        for p in stream.chunks(piece) {
            u.write_all(p).unwrap();
        }
        u.flush().unwrap();
        drop(u);
        let got = std::fs::read(dst.join("big")).unwrap();
        assert!(got == big(), "pieces of {piece}: bytes differ");
        assert_eq!(std::fs::read(dst.join("small")).unwrap(), b"small");
        let m = std::fs::metadata(dst.join("big")).unwrap();
        assert!(
            m.blocks() * 512 <= (5 << 20) + 8192,
            "pieces of {piece}: the hole kept ({} blocks)",
            m.blocks()
        );
    }
}

#[test]
fn a_cut_direct_stream_leaves_every_byte_that_arrived_in_the_partial_copy() {
    let d = scratch();
    let src = sources(d.path());
    let mut stream = Vec::new();
    pack(std::slice::from_ref(&src), OPTS, None, &mut stream).unwrap();
    let dst = d.path().join("dst");
    // Cut 2.5 MiB into big's data: half a stage is still held in memory.
    let cut = stream
        .windows(3)
        .position(|w| w == [big()[0], big()[1], big()[2]])
        .unwrap()
        + (5 << 19);
    let mut u =
        Unpacker::new(Dest::open(&dst, false, None).unwrap(), "dst", true).with_direct(true);
    u.write_all(&stream[..cut]).unwrap();
    drop(u);
    let partial: Vec<_> = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".big.rdcp-")
        })
        .collect();
    assert_eq!(partial.len(), 1, "{partial:?}");
    assert!(std::fs::read(&partial[0]).unwrap() == big()[..5 << 19]);
    assert!(!dst.join("big").exists(), "nothing under its name");
}
