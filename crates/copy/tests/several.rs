//! rdcp's resume of several files into a directory, and several sources into
//! a non-directory, on the library alone.

use rdpipe_copy::glob::escape;
use rdpipe_copy::{list, pack, Dest, Manifest, PackOptions, Unpacker};
use std::io::Write;
use std::path::Path;

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Several files into a directory, one cut short there: the listing (by
/// literal names or by a pattern) offers its partial copy, the copy
/// continues it, and only rdcp's temporaries of the sources are touched.
#[test]
fn partial_copies_of_several_files_in_dest_are_continued() {
    for tops in [
        vec![escape("a"), escape("b"), escape("c*")],
        vec!["*".to_string()],
    ] {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let data: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(src.join("a"), &data).unwrap();
        std::fs::write(src.join("b"), b"bee").unwrap();
        std::fs::write(src.join("c*"), b"sea").unwrap();
        let out = d.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join(".a.rdcp-9-1"), &data[..500_000]).unwrap();
        std::fs::write(out.join(".x.rdcp-9-2"), b"not a source's").unwrap();
        std::fs::write(out.join(".a.rdcp-old"), b"the user's").unwrap();
        let tops: Vec<Vec<u8>> = tops.iter().map(|t| t.as_bytes().to_vec()).collect();
        let mut listing = Vec::new();
        list(&out, true, &tops, false, &mut listing).unwrap();
        let path = d.path().join("listing");
        std::fs::write(&path, &listing).unwrap();
        let m = Manifest::read(&path).unwrap();
        let sources = [src.join("a"), src.join("b"), src.join("c*")];
        let mut buf = Vec::new();
        let stats = pack(&sources, PackOptions::default(), Some(&m), &mut buf).unwrap();
        assert_eq!(stats.resumed, 1, "{tops:?}");
        assert_eq!(stats.bytes, (data.len() - 500_000 + 6) as u64, "{tops:?}");
        let mut u = Unpacker::new(Dest::open(&out, true, None).unwrap(), "out", false);
        u.write_all(&buf).unwrap();
        u.flush().unwrap();
        assert_eq!(std::fs::read(out.join("a")).unwrap(), data);
        assert_eq!(names(&out), [".a.rdcp-old", ".x.rdcp-9-2", "a", "b", "c*"]);
    }
}

/// A stream of several sources (a pattern's matches) into a destination
/// that is not a directory is refused at its start, nothing created.
#[test]
fn several_sources_into_a_non_directory_are_refused_first() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a"), b"a").unwrap();
    std::fs::write(d.path().join("b"), b"b").unwrap();
    let mut buf = Vec::new();
    let sources = [d.path().join("a"), d.path().join("b")];
    pack(&sources, PackOptions::default(), None, &mut buf).unwrap();
    let dst = d.path().join("new");
    let mut u = Unpacker::new(Dest::open(&dst, false, None).unwrap(), "new", false);
    let e = u.write_all(&buf).unwrap_err().to_string();
    assert_eq!(
        e,
        "new is not a directory, and 2 sources match: name an existing directory"
    );
    drop(u);
    assert_eq!(names(d.path()), ["a", "b"]);
}
