//! Scratch directories for one test: short paths under /tmp (ssh refers to keys
//! and configs inside them), removed on drop, also when the test fails.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh scratch directory, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `/tmp/rdpt-TAG-PID-N`, empty.
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let d = PathBuf::from(format!("/tmp/rdpt-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    /// The path of `name` inside.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// [`Scratch::path`] as a string (for command lines).
    pub fn s(&self, name: &str) -> String {
        self.path(name).to_string_lossy().into_owned()
    }
    /// The names of the entries inside, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
    /// Whether an output file's temporary (`.NAME.rdpipe-...`) inside has data:
    /// a receiver's readiness signal that the stream is flowing.
    pub fn temp_has_data(&self) -> bool {
        std::fs::read_dir(&self.0)
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name().to_string_lossy().contains(".rdpipe-")
                    && e.metadata().map(|m| m.len() > 0).unwrap_or(false)
            })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
