//! The agent's packer output ([`rdpipe_copy::pack::handoff`]): the stream
//! the transfer reads from it is byte for byte the stream `pack` writes,
//! however the reads are cut; a transfer that stops reading stops the
//! packer with an error instead of leaving it waiting.

use rdpipe_copy::pack::handoff::{handoff, HANDOFF_MIN};
use rdpipe_copy::pack::pack_to;
use rdpipe_copy::{pack, Manifest, PackOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

const OPTS: PackOptions = PackOptions {
    recursive: true,
    xattrs: false,
    specials: false,
    direct: false,
    stripe: None,
};

fn tree(d: &Path) -> PathBuf {
    let src = d.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let big = |n: usize, k: u32| {
        (0..n as u32)
            .map(|i| (i * k + i / 991) as u8)
            .collect::<Vec<u8>>()
    };
    std::fs::write(src.join("a-big"), big(3 << 20, 7)).unwrap();
    std::fs::write(src.join("b-edge"), big(HANDOFF_MIN as usize, 11)).unwrap();
    std::fs::write(src.join("c-under"), big(HANDOFF_MIN as usize - 1, 13)).unwrap();
    std::fs::write(src.join("sub/small"), b"small").unwrap();
    std::fs::write(src.join("sub/empty"), b"").unwrap();
    std::fs::write(src.join("sub/z-big"), big(1 << 20, 17)).unwrap();
    std::os::unix::fs::symlink("../a-big", src.join("sub/link")).unwrap();
    src
}

#[test]
fn the_handed_off_stream_is_the_written_one_in_any_reads() {
    let d = tempfile::tempdir().unwrap();
    let src = tree(d.path());
    let mut want = Vec::new();
    pack(std::slice::from_ref(&src), OPTS, None, &mut want).unwrap();
    for read_size in [1usize, 4093, 65536, 1 << 20, 3 << 20] {
        let (mut out, mut input) = handoff().unwrap();
        let sources = vec![src.clone()];
        let packer = std::thread::spawn(move || pack_to(&sources, OPTS, None, &mut out));
        let mut got = Vec::new();
        let mut buf = vec![0; read_size];
        loop {
            let n = input.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let stats = packer.join().unwrap().unwrap();
        assert_eq!(stats.failed, 0);
        assert!(got == want, "reads of {read_size}: the streams differ");
    }
}

#[test]
fn a_transfer_that_stops_reading_stops_the_packer() {
    let d = tempfile::tempdir().unwrap();
    let src = tree(d.path());
    let (mut out, mut input) = handoff().unwrap();
    let packer = std::thread::spawn(move || pack_to(&[src], OPTS, None, &mut out));
    let mut buf = vec![0; 100_000];
    input.read_exact(&mut buf).unwrap();
    drop(input);
    let r = packer.join().unwrap();
    assert!(r.is_err(), "{r:?}");
}

/// Reads the whole stream with `input` keeping a window of `cap` bytes and,
/// every `probe` bytes, checks that the window gives back every offset it
/// claims exactly as the stream had it. With `listing` (a destination's
/// resume listing), packed as `rdcp --resume` packs.
fn read_checking_the_window(
    src: &Path,
    listing: Option<&Path>,
    cap: usize,
    read_size: usize,
    probe: usize,
) -> Vec<u8> {
    use rdpipe_transport::replay::Input;
    let (mut out, mut input) = handoff().unwrap();
    assert!(input.keep_window(cap));
    let sources = vec![src.to_path_buf()];
    let listing = listing.map(Path::to_path_buf);
    let packer = std::thread::spawn(move || {
        let m = listing.map(|l| Manifest::read(&l).unwrap());
        pack_to(&sources, OPTS, m.as_ref(), &mut out)
    });
    let mut got = Vec::new();
    let mut buf = vec![0; read_size];
    let mut next_probe = probe;
    loop {
        let n = input.read(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
        if got.len() >= next_probe || n == 0 {
            next_probe += probe;
            let w = input.window().unwrap();
            let r = w.range();
            assert_eq!(r.end, got.len() as u64);
            assert_eq!(
                r.end - r.start,
                (cap as u64).min(r.end),
                "{r:?}, capacity {cap}"
            );
            let span = r.end - r.start;
            for at in [r.start, r.start + span / 3, r.start + span / 2 + 1, r.end] {
                let at = at.min(r.end);
                let b = w.since(at).unwrap();
                assert!(
                    b == got[at as usize..],
                    "window {r:?}: bytes from {at} differ"
                );
            }
            if r.start > 0 {
                assert!(w.since(r.start - 1).is_err());
            }
            assert!(w.since(r.end + 1).is_err());
        }
        if n == 0 {
            break;
        }
    }
    packer.join().unwrap().unwrap();
    got
}

#[test]
fn the_kept_window_gives_back_what_the_stream_had_batches_files_and_all() {
    let d = tempfile::tempdir().unwrap();
    let src = tree(d.path());
    let mut want = Vec::new();
    pack(std::slice::from_ref(&src), OPTS, None, &mut want).unwrap();
    for (cap, read_size, probe) in [
        (1 << 10, 4093, 100_000),
        (300 << 10, 65536, 333_333),
        (1 << 20, 1 << 20, 1 << 20),
        (32 << 20, 100_000, 700_000),
    ] {
        let got = read_checking_the_window(&src, None, cap, read_size, probe);
        assert!(got == want, "cap {cap}: the streams differ");
    }
}

#[test]
fn a_resumed_file_is_kept_from_where_its_rest_starts() {
    // The packer seeks a file with a partial copy at the destination past
    // that prefix before handing it over: the window must read it again
    // from there, not from its start.
    let d = tempfile::tempdir().unwrap();
    let src = tree(d.path());
    let dst = d.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let big = std::fs::read(src.join("a-big")).unwrap();
    std::fs::write(dst.join(".a-big.rdcp-1-1"), &big[..1_000_001]).unwrap();
    let mut listing = Vec::new();
    rdpipe_copy::list(&dst, false, &[b"src".to_vec()], false, &mut listing).unwrap();
    let lpath = d.path().join("listing");
    std::fs::write(&lpath, &listing).unwrap();
    let m = Manifest::read(&lpath).unwrap();
    let mut want = Vec::new();
    let stats = pack(std::slice::from_ref(&src), OPTS, Some(&m), &mut want).unwrap();
    assert_eq!(stats.resumed, 1);
    for cap in [64 << 10, 32 << 20] {
        let got = read_checking_the_window(&src, Some(&lpath), cap, 65536, 200_000);
        assert!(got == want, "cap {cap}: the streams differ");
    }
}

#[test]
fn past_its_open_files_the_window_copies_and_still_gives_everything_back() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("many");
    std::fs::create_dir(&src).unwrap();
    // More files to hand over than the window keeps open, all in it.
    for i in 0..80u32 {
        let body: Vec<u8> = (0..HANDOFF_MIN as u32 + i)
            .map(|j| (j * 31 + i) as u8)
            .collect();
        std::fs::write(src.join(format!("f{i:03}")), body).unwrap();
    }
    let mut want = Vec::new();
    pack(std::slice::from_ref(&src), OPTS, None, &mut want).unwrap();
    let got = read_checking_the_window(&src, None, 64 << 20, 100_000, 4 << 20);
    assert!(got == want, "the streams differ");
}

#[test]
fn a_file_changed_after_it_was_sent_is_not_resent_from_its_new_bytes() {
    use rdpipe_transport::replay::{Input, Resend};
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("one");
    std::fs::write(&src, vec![7u8; 1 << 20]).unwrap();
    let (mut out, mut input) = handoff().unwrap();
    assert!(input.keep_window(32 << 20));
    let sources = vec![src.clone()];
    let packer = std::thread::spawn(move || pack_to(&sources, OPTS, None, &mut out));
    let mut got = Vec::new();
    input.read_to_end(&mut got).unwrap();
    packer.join().unwrap().unwrap();
    let w = input.window().unwrap();
    assert_eq!(w.since(0).unwrap(), got);
    // Rewritten in place (same size): its bytes in the window are gone.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&src, vec![8u8; 1 << 20]).unwrap();
    let e = w.since(0).unwrap_err();
    assert!(matches!(e, Resend::Window(_)), "{e:?}");
    // What came after the file (its trailer, the end) is still there.
    let data = (0..got.len())
        .find(|&i| got.len() - i >= 1 << 20 && got[i..i + (1 << 20)].iter().all(|&b| b == 7))
        .unwrap();
    let tail = (data + (1 << 20)) as u64;
    assert_eq!(w.since(tail).unwrap(), got[tail as usize..]);
    assert!(w.since(tail - 1).is_err());
}
