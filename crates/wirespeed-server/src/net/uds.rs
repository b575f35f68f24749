//! Unix domain socket listeners.
//!
//! A socket file left behind by a server that died is stale: nothing
//! accepts on it. Binding tries to connect first; a refused connection
//! means stale, and the file is replaced. A live server on the path, or a
//! path that is not a socket at all, is an error: wirespeed never deletes
//! a file it did not make.
//!
//! The socket is made mode 0660 (owner and group may connect), whatever the
//! umask; to narrow or widen access, choose the directory it lives in.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

/// The mode of every socket wirespeed creates.
pub(crate) const SOCKET_MODE: u32 = 0o660;

/// Binds a listener at `path`, replacing a stale socket file.
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "a server is already listening on this socket",
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the path exists and is not a socket; wirespeed will not replace it",
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stale_sockets_are_replaced_and_live_ones_are_not() {
        let dir = std::env::temp_dir().join(format!("wirespeed-uds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);

        // A stale file: bound by a std listener that is then dropped.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let live = bind(&path).expect("a stale socket is replaced");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);

        // Live: refused, and the file stays.
        let e = bind(&path).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        drop(live);

        // Not a socket: refused, and the file stays.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"data").unwrap();
        assert_eq!(
            bind(&path).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
