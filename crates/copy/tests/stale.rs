//! Temporaries that earlier runs left (`unpack/stale.rs`), on the library
//! alone: a plain copy of NAME removes the `.NAME.rdcp-PID-N` of processes no
//! longer running, `--resume` those of a file it skips as unchanged, and
//! `--delete` those in a directory it removes; a live process's temporary
//! and a user's lookalike stay.

use rdpipe_copy::mirror::Mirror;
use rdpipe_copy::pack::{pack_mirror_to, Writing};
use rdpipe_copy::{list, pack, Dest, Manifest, PackOptions, Unpacker};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command};

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The id of a process that has ended.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    c.wait().unwrap();
    c.id()
}

/// A running process (another rdcp writing the same file, as far as the
/// unpacker can tell), ended when dropped.
struct Live(Child);

impl Live {
    fn start() -> Live {
        Live(Command::new("sleep").arg("1000").spawn().unwrap())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn unpack(dest: Dest, stream: &[u8], threads: usize) {
    let mut u = Unpacker::new(dest, "out", true).with_create_threads(threads);
    u.write_all(stream).unwrap();
    u.flush().unwrap();
}

/// A plain copy of f, on the decoding thread, on the pool's workers, and as
/// DEST itself: only the live process's temporary and the lookalike stay
/// beside it, and another file's stale one is not touched.
#[test]
fn a_plain_copy_removes_the_stale_temporaries_of_what_it_writes() {
    let live = Live::start();
    for (threads, as_name) in [(1, false), (2, false), (1, true)] {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("f");
        std::fs::write(&src, b"new content").unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let dead = format!(".f.rdcp-{}-1", dead_pid());
        let running = format!(".f.rdcp-{}-1", live.0.id());
        let other = format!(".g.rdcp-{}-1", dead_pid());
        for n in [&dead, &running, ".f.rdcp-old", &other] {
            std::fs::write(out.join(n), b"partial").unwrap();
        }
        let mut stream = Vec::new();
        pack(&[src], PackOptions::default(), None, &mut stream).unwrap();
        let dest = if as_name {
            Dest::open(&out.join("f"), false, None).unwrap()
        } else {
            Dest::open(&out, true, None).unwrap()
        };
        unpack(dest, &stream, threads);
        let mut want = vec![running.clone(), ".f.rdcp-old".into(), other, "f".into()];
        want.sort();
        assert_eq!(names(&out), want, "threads {threads}, as {as_name}");
        assert_eq!(std::fs::read(out.join("f")).unwrap(), b"new content");
    }
}

/// `--resume`: f is complete and unchanged, so it is skipped, and its stale
/// partial copy goes; g's partial copy is continued, not removed first.
#[test]
fn resume_removes_the_stale_partial_copy_of_a_file_it_skips() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"unchanged").unwrap();
    let g: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(src.join("g"), &g).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let sources = [src.join("f"), src.join("g")];
    let mut stream = Vec::new();
    pack(&sources[..1], PackOptions::default(), None, &mut stream).unwrap();
    unpack(Dest::open(&out, true, None).unwrap(), &stream, 1);
    let stale_f = format!(".f.rdcp-{}-1", dead_pid());
    std::fs::write(out.join(&stale_f), b"unch").unwrap();
    std::fs::write(out.join(format!(".g.rdcp-{}-1", dead_pid())), &g[..100_000]).unwrap();

    let mut listing = Vec::new();
    let tops = [b"f".to_vec(), b"g".to_vec()];
    list(&out, true, &tops, false, &mut listing).unwrap();
    let at = d.path().join("listing");
    std::fs::write(&at, &listing).unwrap();
    let m = Manifest::read(&at).unwrap();
    let mut stream = Vec::new();
    let p = pack(&sources, PackOptions::default(), Some(&m), &mut stream).unwrap();
    assert_eq!((p.skipped, p.resumed), (1, 1), "{p:?}");
    unpack(Dest::open(&out, true, None).unwrap(), &stream, 1);
    assert_eq!(names(&out), ["f", "g"]);
    assert_eq!(std::fs::read(out.join("g")).unwrap(), g);
}

/// `--delete`: a directory the source no longer has, holding only a stale
/// temporary, goes; one holding a live process's temporary stays.
#[test]
fn a_mirror_removes_a_directory_that_holds_only_stale_temporaries() {
    let live = Live::start();
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    let dst = d.path().join("dst");
    for (dir, pid) in [("old", dead_pid()), ("busy", live.0.id())] {
        std::fs::create_dir_all(dst.join(dir)).unwrap();
        std::fs::write(dst.join(dir).join(format!(".x.rdcp-{pid}-1")), b"p").unwrap();
    }
    let dead_beside = format!(".gone.rdcp-{}-3", dead_pid());
    std::fs::write(dst.join(&dead_beside), b"p").unwrap();
    let opts = PackOptions {
        recursive: true,
        ..PackOptions::default()
    };
    let m = Mirror::default();
    let mut stream = Vec::new();
    pack_mirror_to(
        std::slice::from_ref(&src),
        opts,
        None,
        Some(m),
        &mut Writing::new(&mut stream),
    )
    .unwrap();
    let mut u =
        Unpacker::new(Dest::mirror(&dst, &m).unwrap(), "dst", true).with_mirror(m, String::new());
    u.write_all(&stream).unwrap();
    u.flush().unwrap();
    assert_eq!(names(&dst), ["a", "busy"]);
    assert_eq!(names(&dst.join("busy")).len(), 1);
}
