//! Where the streams of a striped copy (`rdcp --streams`) put it: the first
//! stream reads DEST as [`Dest::open`] does and marks its reading; the
//! others follow that mark, since by the time they look the first may have
//! created DEST (a copy named DEST would then look like a directory to copy
//! into).

use super::Dest;
use crate::stripe::{Marker, Stripe, ARRIVAL};
use rustix::fs::{Mode, OFlags};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

impl Dest {
    /// [`Dest::open`] for stream `s` of a striped copy, with its marker
    /// (none for a device: nothing is published there).
    pub fn open_stream(
        dest: &Path,
        must_be_dir: bool,
        resumed_top: Option<&[u8]>,
        s: &Stripe,
    ) -> Result<(Dest, Option<Marker>), String> {
        let held = |d: Dest| -> Result<(Dest, Option<Marker>), String> {
            let base = match &d {
                Dest::Into(fd) => fd,
                Dest::As { parent, .. } => parent,
                Dest::Device(_) => return Ok((d, None)),
            };
            let m = Marker::hold(base, s)
                .map_err(|e| format!("cannot mark stream {} of the copy in {}: {e}", s.index, dest.display()))?;
            Ok((d, Some(m)))
        };
        let device = std::fs::metadata(dest).is_ok_and(|m| !m.is_dir() && !m.is_file());
        if s.index == 0 || device {
            return held(Dest::open(dest, must_be_dir, resumed_top)?);
        }
        let first = s.marker(0);
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let opened = |p: &Path| {
            rustix::fs::open(p, flags, Mode::empty())
                .map_err(|e| format!("cannot open {}: {}", p.display(), io::Error::from(e)))
        };
        let marked = |dir: &Path| {
            std::fs::symlink_metadata(dir.join(std::ffi::OsStr::from_bytes(&first))).is_ok()
        };
        let start = Instant::now();
        loop {
            if marked(dest) {
                return held(Dest::Into(opened(dest)?));
            }
            if marked(parent) {
                let name = dest
                    .file_name()
                    .ok_or_else(|| format!("{}: not a name a copy can take", dest.display()))?;
                return held(Dest::As {
                    parent: opened(parent)?,
                    name: name.as_bytes().to_vec(),
                });
            }
            if start.elapsed() > ARRIVAL {
                return Err(format!(
                    "{}: the copy's first stream did not start within {} s",
                    dest.display(),
                    ARRIVAL.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
