//! `-p` as root: every file ends with the owner and group it was sent with,
//! whether the receiver's new file already had them (no `fchown` then) or
//! not: another user's file, and root's file in a set-group-ID directory,
//! which gives new files its own group.

use rdpipe_copy::{pack, Dest, PackOptions, Unpacker};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn copy(src: &Path, dst: &Path, threads: usize) {
    let mut buf = Vec::new();
    let opts = PackOptions {
        recursive: true,
        xattrs: false,
        specials: false,
        direct: false,
        stripe: None,
    };
    pack(&[src.to_path_buf()], opts, None, &mut buf).expect("packed");
    let dest = Dest::open(dst, true, None).expect("destination");
    let mut u = Unpacker::new(dest, "dst", true).with_create_threads(threads);
    for piece in buf.chunks(4096) {
        u.write_all(piece).expect("unpacked");
    }
    u.flush().expect("verified");
}

#[test]
fn owners_and_groups_are_kept_also_where_a_new_file_gets_another_group() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: owners_and_groups_…: needs root (chown)");
        assert!(
            std::env::var_os("RDPIPE_REQUIRE_ALL").is_none(),
            "RDPIPE_REQUIRE_ALL is set and this test needs root"
        );
        return;
    }
    let d = tempfile::tempdir().expect("tempdir");
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("roots"), b"root's").unwrap();
    std::fs::write(src.join("theirs"), vec![7u8; 300 << 10]).unwrap();
    std::os::unix::fs::chown(src.join("theirs"), Some(1234), Some(5678)).unwrap();
    std::fs::write(src.join("small-theirs"), b"x").unwrap();
    std::os::unix::fs::chown(src.join("small-theirs"), Some(1234), Some(5678)).unwrap();
    for threads in [1, 3] {
        // The destination gives what is created in it group 4321.
        let out = d.path().join(format!("out{threads}"));
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::chown(&out, None, Some(4321)).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o2775)).unwrap();
        copy(&src, &out, threads);
        for (name, owner) in [
            ("roots", (0, 0)),
            ("theirs", (1234, 5678)),
            ("small-theirs", (1234, 5678)),
        ] {
            let m = std::fs::metadata(out.join("src").join(name)).unwrap();
            assert_eq!((m.uid(), m.gid()), owner, "{name}, {threads} threads");
        }
        // A plain directory: root's file needs no chown and is root's.
        let plain = d.path().join(format!("plain{threads}"));
        std::fs::create_dir(&plain).unwrap();
        copy(&src, &plain, threads);
        let m = std::fs::metadata(plain.join("src/roots")).unwrap();
        assert_eq!((m.uid(), m.gid()), (0, 0));
        let m = std::fs::metadata(plain.join("src/theirs")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
    }
}
