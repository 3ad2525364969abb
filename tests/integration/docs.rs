//! The committed man pages and shell completions must match what the clap
//! definitions generate; regenerate with `RDPIPE_UPDATE_DOCS=1 cargo test --test integration docs::`.

use rdma_pipe::cli::docs::{commands, completion, completion_files, man_page};
use std::path::Path;

fn check(path: &Path, want: &[u8], stale: &mut Vec<String>) {
    if std::env::var_os("RDPIPE_UPDATE_DOCS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, want).unwrap();
        return;
    }
    match std::fs::read(path) {
        Ok(have) if have == want => {}
        _ => stale.push(path.display().to_string()),
    }
}

#[test]
fn man_pages_and_completions_match_the_cli() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut stale = Vec::new();
    for c in commands() {
        check(
            &root.join("man").join(format!("{}.1", c.name)),
            &man_page(&c),
            &mut stale,
        );
        for (shell, file) in completion_files(c.name) {
            check(
                &root.join("completions").join(file),
                &completion(&c, shell),
                &mut stale,
            );
        }
    }
    assert!(
        stale.is_empty(),
        "generated docs differ from the committed ones: {stale:?}\n\
         regenerate with: RDPIPE_UPDATE_DOCS=1 cargo test --test integration docs::"
    );
}

#[test]
fn man_pages_have_the_promised_sections() {
    for c in commands() {
        let page = String::from_utf8(man_page(&c)).unwrap();
        for s in [
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "EXAMPLES",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "SEE ALSO",
        ] {
            assert!(
                page.contains(&format!(".SH {s}")) || page.contains(&format!(".SH \"{s}\"")),
                "{}: no {s} section",
                c.name
            );
        }
        assert!(
            page.contains("RDPIPE_KEY"),
            "{}: RDPIPE_KEY undocumented",
            c.name
        );
    }
}
