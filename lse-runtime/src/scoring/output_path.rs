//! Where an output path really leads: `-` (standard output), the end of its symlink chain,
//! and what kind of file is there; and whether two paths name the same file.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Most symlinks followed before giving up (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

/// What an output path leads to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `-`: standard output.
    Stdout,
    /// A regular file or nothing yet: written under a temporary name and renamed onto this
    /// path (the symlink chain's end, so a symlink keeps pointing at the new file).
    File(PathBuf),
    /// A FIFO, device, socket or open file descriptor (`/dev/stdout`): written straight
    /// through the path as given, never replaced.
    Stream {
        /// The path opened for writing, as given.
        path: PathBuf,
        /// What it is ("a FIFO", "a character device", ...).
        kind: &'static str,
    },
}

/// The directory a file path lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// True for the errors that mean "nothing there" (the checks of the directory report why).
fn absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// The paths `path`'s last component leads through, itself first and the end of its symlink
/// chain (which may not exist yet) last. Directory components are left as given: the kernel
/// follows those.
fn symlink_chain(path: &Path) -> io::Result<Vec<PathBuf>> {
    let mut chain = vec![path.to_path_buf()];
    for _ in 0..MAX_SYMLINKS {
        let current = &chain[chain.len() - 1];
        match fs::symlink_metadata(current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(current)?;
                let next = if target.is_absolute() {
                    target
                } else {
                    parent_dir(current).join(target)
                };
                chain.push(next);
            }
            Ok(_) => return Ok(chain),
            Err(e) if absent(&e) => return Ok(chain),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "more than {MAX_SYMLINKS} symlinks (a loop?)"
    )))
}

/// Follows the symlinks of `path`'s last component to the path they end at (which may not
/// exist yet).
pub fn follow_symlinks(path: &Path) -> io::Result<PathBuf> {
    let mut chain = symlink_chain(path)?;
    Ok(chain.pop().unwrap_or_else(|| path.to_path_buf()))
}

/// What `meta` describes, in words, when it is not a regular file or a directory.
pub fn special_kind(meta: &fs::Metadata) -> Option<&'static str> {
    let ft = meta.file_type();
    if ft.is_file() || ft.is_dir() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return Some("a FIFO");
        }
        if ft.is_char_device() {
            return Some("a character device");
        }
        if ft.is_block_device() {
            return Some("a block device");
        }
        if ft.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// True for a path under `/proc` or `/dev/fd`: an open file descriptor's magic link
/// (`/dev/stdout` leads there), which must be written through, never renamed over.
fn is_descriptor_link(path: &Path) -> bool {
    path.starts_with("/proc") || path.starts_with("/dev/fd")
}

/// Where writing `path` leads. A directory is returned as [`Destination::File`]; the
/// writability checks refuse it.
pub fn destination(path: &Path) -> io::Result<Destination> {
    if path.as_os_str() == "-" {
        return Ok(Destination::Stdout);
    }
    // What the kernel opens (every link followed, magic ones included): a FIFO or device is
    // written through the path as given.
    match fs::metadata(path) {
        Ok(meta) => {
            if let Some(kind) = special_kind(&meta) {
                return Ok(Destination::Stream {
                    path: path.to_path_buf(),
                    kind,
                });
            }
        }
        Err(e) if absent(&e) => {}
        Err(e) => return Err(e),
    }
    let mut chain = symlink_chain(path)?;
    if chain.iter().any(|p| is_descriptor_link(p)) {
        return Ok(Destination::Stream {
            path: path.to_path_buf(),
            kind: "an open file descriptor",
        });
    }
    Ok(Destination::File(
        chain.pop().unwrap_or_else(|| path.to_path_buf()),
    ))
}

/// A key naming the file `path` leads to: its device and inode when it exists, else the
/// canonical directory joined with the file name (after following symlinks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileKey {
    /// Standard input or output (`-`).
    Dash,
    /// An existing file: (device, inode).
    Inode(u64, u64),
    /// A file not created yet.
    Path(PathBuf),
}

/// The [`FileKey`] of `path`.
pub fn file_key(path: &Path) -> FileKey {
    if path.as_os_str() == "-" {
        return FileKey::Dash;
    }
    #[cfg(unix)]
    if let Ok(meta) = fs::metadata(path) {
        use std::os::unix::fs::MetadataExt;
        return FileKey::Inode(meta.dev(), meta.ino());
    }
    let end = follow_symlinks(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = fs::canonicalize(parent_dir(&end)).unwrap_or_else(|_| parent_dir(&end));
    match end.file_name() {
        Some(name) => FileKey::Path(dir.join(name)),
        None => FileKey::Path(end),
    }
}

/// True when `a` and `b` lead to the same file (or are both `-`).
pub fn same_file(a: &Path, b: &Path) -> bool {
    file_key(a) == file_key(b)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_are_followed_to_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        fs::write(&real, b"x").unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        symlink("real.json", &a).unwrap();
        symlink(&a, &b).unwrap();
        assert_eq!(follow_symlinks(&b).unwrap(), dir.path().join("real.json"));
        assert_eq!(destination(&b).unwrap(), Destination::File(real.clone()));
        // A dangling link leads to the file it will create.
        let dangling = dir.path().join("d");
        symlink("new.json", &dangling).unwrap();
        assert_eq!(
            destination(&dangling).unwrap(),
            Destination::File(dir.path().join("new.json"))
        );
        let (l1, l2) = (dir.path().join("l1"), dir.path().join("l2"));
        symlink(&l2, &l1).unwrap();
        symlink(&l1, &l2).unwrap();
        assert!(follow_symlinks(&l1)
            .unwrap_err()
            .to_string()
            .contains("loop"));
        assert_eq!(destination(Path::new("-")).unwrap(), Destination::Stdout);
        assert_eq!(
            destination(Path::new("/dev/null")).unwrap(),
            Destination::Stream {
                path: "/dev/null".into(),
                kind: "a character device"
            }
        );
    }

    #[test]
    fn same_file_sees_through_links_and_spellings() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("base.kld");
        fs::write(&real, b"x").unwrap();
        let link = dir.path().join("link.kld");
        symlink(&real, &link).unwrap();
        let hard = dir.path().join("hard.kld");
        fs::hard_link(&real, &hard).unwrap();
        let dotted = dir.path().join(".").join("base.kld");
        for other in [&link, &hard, &dotted] {
            assert!(same_file(&real, other), "{}", other.display());
        }
        let new = dir.path().join("new.json");
        assert!(same_file(&new, &dir.path().join(".").join("new.json")));
        assert!(!same_file(&real, &new));
        assert!(same_file(Path::new("-"), Path::new("-")));
        assert!(!same_file(Path::new("-"), &real));
    }
}
