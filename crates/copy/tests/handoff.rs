//! The agent's packer output ([`rdpipe_copy::pack::handoff`]): the stream
//! the transfer reads from it is byte for byte the stream `pack` writes,
//! however the reads are cut; a transfer that stops reading stops the
//! packer with an error instead of leaving it waiting.

use rdpipe_copy::pack::handoff::{handoff, HANDOFF_MIN};
use rdpipe_copy::pack::pack_to;
use rdpipe_copy::{pack, PackOptions};
use std::io::Read;
use std::path::{Path, PathBuf};

const OPTS: PackOptions = PackOptions {
    recursive: true,
    xattrs: false,
    specials: false,
    direct: false,
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
