//! Atomic output files: write to a temporary file in the destination's directory, fsync,
//! then rename over the destination, so an interrupted or failed run never leaves a
//! half-written JSON report or KL-divergence base.
//!
//! The destination is where the path leads ([`super::output_path::destination`]): a symlink
//! is followed and its target replaced (the link stays); `-` is standard output, and a FIFO
//! or character device is written straight, never replaced, by [`write_atomic`]. An
//! [`AtomicFile`] (the KL-divergence base, which is patched after its records) needs a
//! regular file and refuses the others.
//!
//! Temporary files that are still being written are kept in a process-wide registry so a
//! Ctrl-C handler can delete them ([`remove_in_flight_temp_files`]); a dropped, uncommitted
//! [`AtomicFile`] deletes its own.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::output_path::{destination, parent_dir, Destination};

/// Temporary files created and not yet committed or removed.
static IN_FLIGHT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Makes temporary names unique within the process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why an output file cannot be checked, written or committed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The path names no file (empty, or ends in `..` or `/`).
    #[error("output path `{0}` does not name a file")]
    NotAFileName(PathBuf),
    /// The path is an existing directory.
    #[error("output path `{0}` is a directory, expected a file path")]
    IsDirectory(PathBuf),
    /// The directory that should hold the file does not exist.
    #[error("cannot write `{path}`: directory `{dir}` does not exist")]
    MissingDirectory {
        /// The output path.
        path: PathBuf,
        /// Its parent directory.
        dir: PathBuf,
    },
    /// The parent exists but is not a directory.
    #[error("cannot write `{path}`: `{dir}` is not a directory")]
    NotADirectory {
        /// The output path.
        path: PathBuf,
        /// Its parent.
        dir: PathBuf,
    },
    /// The directory does not accept new files.
    #[error("cannot write `{path}`: directory `{dir}` is not writable: {source}")]
    NotWritable {
        /// The output path.
        path: PathBuf,
        /// Its parent directory.
        dir: PathBuf,
        /// The error from creating a probe file.
        source: io::Error,
    },
    /// The path leads to something other than a regular file where one is needed.
    #[error(
        "cannot write `{path}`: it is {kind}, and this output needs a regular file (it is \
         written under a temporary name, completed, then renamed into place)"
    )]
    NotRegular {
        /// The output path.
        path: PathBuf,
        /// What is there ("a FIFO", "standard output", ...).
        kind: &'static str,
    },
    /// An I/O step failed.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        /// What was being done ("write", "rename ... onto", ...).
        action: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

fn registry() -> MutexGuard<'static, Vec<PathBuf>> {
    IN_FLIGHT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn unregister(temp: &Path) {
    registry().retain(|p| p != temp);
}

/// Adds a temporary file or directory being written (outside [`AtomicFile`]) to the ones an
/// interrupt removes ([`remove_in_flight_temp_files`]).
pub fn track_temp(path: &Path) {
    registry().push(path.to_path_buf());
}

/// Takes a path given to [`track_temp`] off the list (it was committed or removed).
pub fn untrack_temp(path: &Path) {
    unregister(path);
}

/// A fresh temporary path next to `path`.
fn temp_path_for(path: &Path) -> Result<PathBuf, OutputError> {
    let name = path
        .file_name()
        .ok_or_else(|| OutputError::NotAFileName(path.to_path_buf()))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.{n}.lse-tmp", std::process::id()));
    Ok(parent_dir(path).join(temp_name))
}

/// Where `path` leads, or why that cannot be told.
fn resolve(path: &Path) -> Result<Destination, OutputError> {
    if path.as_os_str().is_empty() {
        return Err(OutputError::NotAFileName(path.to_path_buf()));
    }
    destination(path).map_err(|source| OutputError::Io {
        action: "follow the symlinks of",
        path: path.to_path_buf(),
        source,
    })
}

/// Fails early, before any scoring, when [`write_atomic`] could not write `path`: its
/// directory is missing or not writable, or the path is a directory. `-` (standard output),
/// a FIFO or a character device passes; a regular file's directory gets a probe file,
/// created and removed.
pub fn check_writable(path: &Path) -> Result<(), OutputError> {
    match resolve(path)? {
        Destination::Stdout => Ok(()),
        Destination::Stream {
            kind: "a FIFO" | "a character device" | "an open file descriptor",
            ..
        } => Ok(()),
        Destination::Stream { kind, .. } => Err(OutputError::NotRegular {
            path: path.to_path_buf(),
            kind,
        }),
        Destination::File(end) => check_file_writable(path, &end),
    }
}

/// Fails early when an [`AtomicFile`] could not be created at `path`: as
/// [`check_writable`], and anything but a regular file (or none yet) is refused.
pub fn check_regular_writable(path: &Path) -> Result<(), OutputError> {
    match resolve(path)? {
        Destination::Stdout => Err(OutputError::NotRegular {
            path: path.to_path_buf(),
            kind: "standard output",
        }),
        Destination::Stream { kind, .. } => Err(OutputError::NotRegular {
            path: path.to_path_buf(),
            kind,
        }),
        Destination::File(end) => check_file_writable(path, &end),
    }
}

/// The checks of a regular file's destination `end` (where `path` leads).
fn check_file_writable(path: &Path, end: &Path) -> Result<(), OutputError> {
    if end.is_dir() {
        return Err(OutputError::IsDirectory(path.to_path_buf()));
    }
    let dir = parent_dir(end);
    if !dir.exists() {
        return Err(OutputError::MissingDirectory {
            path: path.to_path_buf(),
            dir,
        });
    }
    if !dir.is_dir() {
        return Err(OutputError::NotADirectory {
            path: path.to_path_buf(),
            dir,
        });
    }
    let probe = temp_path_for(end)?;
    // Registered while it exists, so an interrupt in between removes it too.
    registry().push(probe.clone());
    let created = OpenOptions::new().write(true).create_new(true).open(&probe);
    if created.is_ok() {
        let _ = fs::remove_file(&probe);
    }
    unregister(&probe);
    match created {
        Ok(_) => Ok(()),
        Err(source) => Err(OutputError::NotWritable {
            path: path.to_path_buf(),
            dir,
            source,
        }),
    }
}

/// Deletes every temporary file an [`AtomicFile`] is still writing (and every temporary
/// directory given to [`track_temp`], and every writability probe), and returns how many
/// were removed. Meant for an interrupt handler running on a normal thread (as `ctrlc`
/// handlers do), not for a raw async-signal context.
pub fn remove_in_flight_temp_files() -> usize {
    let mut list = registry();
    let mut removed = 0;
    for temp in list.drain(..) {
        if fs::remove_file(&temp)
            .or_else(|_| fs::remove_dir_all(&temp))
            .is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// A file written under a temporary name and renamed onto its destination by
/// [`AtomicFile::commit`]. Dropping it uncommitted deletes the temporary file.
#[derive(Debug)]
pub struct AtomicFile {
    /// The path as given (for messages).
    target: PathBuf,
    /// Where it leads: the file the rename replaces.
    end: PathBuf,
    temp: PathBuf,
    writer: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Creates the temporary file next to where `path` leads (checks as
    /// [`check_regular_writable`] does: a symlink is followed, anything but a regular file
    /// is refused).
    pub fn create(path: &Path) -> Result<AtomicFile, OutputError> {
        check_regular_writable(path)?;
        let Destination::File(end) = resolve(path)? else {
            return Err(OutputError::NotRegular {
                path: path.to_path_buf(),
                kind: "not a regular file",
            });
        };
        let temp = temp_path_for(&end)?;
        // Register before creating so a handler never misses a file that exists.
        registry().push(temp.clone());
        let file = match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => file,
            Err(source) => {
                unregister(&temp);
                return Err(OutputError::Io {
                    action: "create temporary file",
                    path: temp,
                    source,
                });
            }
        };
        Ok(AtomicFile {
            target: path.to_path_buf(),
            end,
            temp,
            writer: Some(BufWriter::new(file)),
        })
    }

    /// The destination path, as given.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Overwrites bytes at `offset` of what was written so far (a header field known only at
    /// the end), then carries on appending.
    pub fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let w = self
            .writer
            .as_mut()
            .ok_or_else(|| io::Error::other("file already committed"))?;
        let end = w.seek(SeekFrom::End(0))?;
        let past = offset
            .checked_add(bytes.len() as u64)
            .ok_or_else(|| io::Error::other("offset overflows"))?;
        if past > end {
            return Err(io::Error::other(format!(
                "bytes {offset}..{past} are past the end ({end}) of what was written"
            )));
        }
        w.seek(SeekFrom::Start(offset))?;
        w.write_all(bytes)?;
        w.seek(SeekFrom::Start(end))?;
        Ok(())
    }

    /// The temporary path being written.
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Flushes, fsyncs and renames the temporary file onto the destination. On failure the
    /// temporary file is removed and the destination is left as it was.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let Some(writer) = self.writer.take() else {
            return Err(OutputError::Io {
                action: "commit",
                path: self.target.clone(),
                source: io::Error::other("file already committed"),
            });
        };
        let result = Self::persist(writer, &self.temp, &self.end);
        if result.is_err() {
            let _ = fs::remove_file(&self.temp);
        }
        unregister(&self.temp);
        result
    }

    fn persist(writer: BufWriter<File>, temp: &Path, target: &Path) -> Result<(), OutputError> {
        let io_err = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| OutputError::Io {
                action,
                path,
                source,
            }
        };
        let file = writer
            .into_inner()
            .map_err(|e| e.into_error())
            .map_err(io_err("write", temp))?;
        file.sync_all().map_err(io_err("fsync", temp))?;
        drop(file);
        fs::rename(temp, target).map_err(io_err("rename into place", target))?;
        // Persist the rename itself; not every file system can fsync a directory.
        if let Ok(dir) = File::open(parent_dir(target)) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.writer {
            Some(w) => w.write(buf),
            None => Err(io::Error::other("file already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.writer {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.writer.take().is_some() {
            let _ = fs::remove_file(&self.temp);
            unregister(&self.temp);
        }
    }
}

/// Writes `bytes` to `path`: atomically to a regular file (or where a symlink leads), straight
/// to standard output for `-` and to a FIFO or character device, which are never replaced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    check_writable(path)?;
    let io_err = |source| OutputError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    };
    match resolve(path)? {
        Destination::Stdout => {
            let mut out = io::stdout().lock();
            return out
                .write_all(bytes)
                .and_then(|()| out.flush())
                .map_err(io_err);
        }
        Destination::Stream { path: end, .. } => {
            let mut file = OpenOptions::new().write(true).open(end).map_err(io_err)?;
            return file.write_all(bytes).map_err(io_err);
        }
        Destination::File(_) => {}
    }
    let mut file = AtomicFile::create(path)?;
    file.write_all(bytes).map_err(|source| OutputError::Io {
        action: "write",
        path: file.temp_path().to_path_buf(),
        source,
    })?;
    file.commit()
}

/// Serializes tests that create atomic files (shared) against the one that removes every
/// in-flight temporary file (exclusive).
#[cfg(test)]
pub(crate) static TEST_FILES: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
        TEST_FILES.read().unwrap_or_else(|p| p.into_inner())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn commit_replaces_target_only_at_the_end() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        fs::write(&path, b"old").unwrap();
        let mut f = AtomicFile::create(&path).unwrap();
        assert_eq!(f.target(), path.as_path());
        f.write_all(b"new contents").unwrap();
        f.flush().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert!(f.temp_path().exists());
        assert_eq!(f.temp_path().parent(), Some(dir.path()));
        f.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new contents");
        assert_eq!(names(dir.path()), vec!["out.json".to_string()]);
    }

    #[test]
    fn drop_without_commit_leaves_nothing() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.kld");
        let temp;
        {
            let mut f = AtomicFile::create(&path).unwrap();
            f.write_all(&[1u8; 10_000]).unwrap();
            temp = f.temp_path().to_path_buf();
            assert!(registry().contains(&temp));
        }
        assert!(!temp.exists());
        assert!(!registry().contains(&temp));
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn write_atomic_writes() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        write_atomic(&path, b"hello").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"hello");
        assert_eq!(names(dir.path()), vec!["a.txt".to_string()]);
    }

    #[test]
    fn check_writable_refusals() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        check_writable(&dir.path().join("ok.json")).unwrap();
        assert!(names(dir.path()).is_empty(), "probe file left behind");

        let missing = dir.path().join("nope").join("out.json");
        let err = check_writable(&missing).unwrap_err();
        assert!(matches!(err, OutputError::MissingDirectory { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("out.json") && msg.contains("does not exist"),
            "{msg}"
        );
        assert!(AtomicFile::create(&missing).is_err());

        let err = check_writable(dir.path()).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");

        let file = dir.path().join("plain");
        fs::write(&file, b"x").unwrap();
        let err = check_writable(&file.join("out.json")).unwrap_err();
        assert!(err.to_string().contains("is not a directory"), "{err}");

        let err = check_writable(Path::new("")).unwrap_err();
        assert!(err.to_string().contains("does not name a file"), "{err}");
        let err = check_writable(&dir.path().join("..")).unwrap_err();
        assert!(matches!(err, OutputError::IsDirectory(_)), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn check_writable_read_only_directory() {
        use std::os::unix::fs::PermissionsExt;
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let ro = dir.path().join("ro");
        fs::create_dir(&ro).unwrap();
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();
        // Root ignores directory permissions; only check where they are enforced.
        let enforced = File::create(ro.join("probe")).is_err();
        let result = check_writable(&ro.join("out.json"));
        if enforced {
            let err = result.unwrap_err();
            assert!(err.to_string().contains("is not writable"), "{err}");
        } else {
            result.unwrap();
            let _ = fs::remove_file(ro.join("probe"));
        }
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn interrupt_removes_in_flight_files() {
        let _g = TEST_FILES.write().unwrap_or_else(|p| p.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let mut a = AtomicFile::create(&dir.path().join("a.json")).unwrap();
        let b = AtomicFile::create(&dir.path().join("b.kld")).unwrap();
        a.write_all(b"partial").unwrap();
        assert_eq!(names(dir.path()).len(), 2);
        assert_eq!(remove_in_flight_temp_files(), 2);
        assert!(names(dir.path()).is_empty());
        // Committing after the handler ran fails cleanly and creates nothing.
        let err = a.commit().unwrap_err();
        assert!(err.to_string().contains("a.json"), "{err}");
        drop(b);
        assert!(names(dir.path()).is_empty());
        assert_eq!(remove_in_flight_temp_files(), 0);
    }
}
