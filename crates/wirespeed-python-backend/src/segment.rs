//! A shared-memory segment between the server and one Python worker: an
//! anonymous memory file (`memfd_create`) mapped by both processes.
//!
//! A memfd has no name in `/dev/shm` and no size to configure: it is not
//! bound by `/dev/shm`'s mount size (Triton's `Failed to increase the
//! shared memory pool size`), it grows with `ftruncate` when a tensor does
//! not fit, and the kernel frees it when the last process holding it closes
//! it, so a worker that dies or a server that is killed leaves nothing
//! behind. A segment never shrinks (it is sealed against it, so not even
//! the worker can cut it under the server's mapping): a numpy array a model kept
//! from an earlier request still views it, and would fault if its pages
//! went away.
//!
//! Three segments a worker has: its requests' inputs, their outputs, and
//! its calls of other models (BLS).
//!
//! Unsafe code: memfd_create and mapping the file (memmap2), which another process also maps.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

use memmap2::{Mmap, MmapMut};

/// Tensors start at multiples of this, so numpy views are aligned.
pub(crate) const ALIGN: usize = 64;

/// The size a segment starts with.
const INITIAL: usize = 64 * 1024;

/// Memory a segment keeps after a request: its pages past the larger of
/// this and four times what the request used are given back.
const KEEP: usize = 4 << 20;

/// Gives back the pages of `file` in `from..to` (the size stays, and the
/// range reads as zeros until written again): a segment grown for one
/// large request does not hold that memory for good.
fn release(file: &File, from: usize, to: usize) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (
        libc::off_t::try_from(from),
        libc::off_t::try_from(to - from),
    ) else {
        return Ok(());
    };
    // SAFETY: a plain fallocate on our descriptor.
    let done = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    if done < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Where a segment's pages may be resident: up to the furthest byte
/// written since they were last given back.
#[derive(Default)]
struct Resident {
    end: usize,
}

impl Resident {
    /// Notes a request that used `used` bytes, and gives back what lies
    /// past `max(KEEP, 4 * used)` when more than that is resident.
    fn settle(&mut self, file: &File, used: usize) {
        self.end = self.end.max(used);
        let keep = aligned(used.saturating_mul(4).max(KEEP));
        if self.end > keep {
            if let Err(e) = release(file, keep, self.end) {
                tracing::debug!("could not give back a segment's pages: {e}");
            }
            self.end = keep.min(self.end);
        }
    }
}

/// `len` rounded up to [`ALIGN`].
pub(crate) fn aligned(len: usize) -> usize {
    len.div_ceil(ALIGN).saturating_mul(ALIGN)
}

fn memfd(name: &str) -> io::Result<File> {
    let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: `name` is a valid C string; the descriptor returned is ours.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(INITIAL as u64)?;
    // Sealed against shrinking: the worker holds the descriptor too, and a
    // file cut under a mapping would fault the server on its next access.
    // SAFETY: a plain fcntl on our descriptor.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// The segment the server writes a request's inputs into.
pub(crate) struct InputSegment {
    file: File,
    map: MmapMut,
    resident: Resident,
}

impl InputSegment {
    pub(crate) fn new(name: &str) -> io::Result<InputSegment> {
        let file = memfd(name)?;
        // SAFETY: the file is a memfd only this server and its worker map;
        // the worker maps it read-only, so nothing changes it under us.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(InputSegment {
            file,
            map,
            resident: Resident::default(),
        })
    }

    /// The segment, at least `len` bytes long: grown (at least doubled)
    /// when it is shorter.
    pub(crate) fn reserve(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if len > self.map.len() {
            let grown = len.max(self.map.len() * 2);
            self.file.set_len(grown as u64)?;
            // SAFETY: as in `new`.
            self.map = unsafe { MmapMut::map_mut(&self.file)? };
        }
        Ok(&mut self.map[..])
    }

    /// After a request that wrote `used` bytes: gives back pages that an
    /// earlier, larger request left.
    pub(crate) fn settle(&mut self, used: usize) {
        self.resident.settle(&self.file, used);
    }

    /// Its size, which the worker maps.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// The segment a worker writes a request's outputs into, and grows itself.
pub(crate) struct OutputSegment {
    file: File,
    map: Mmap,
    resident: Resident,
}

impl OutputSegment {
    pub(crate) fn new(name: &str) -> io::Result<OutputSegment> {
        let file = memfd(name)?;
        // SAFETY: as for the input segment; the worker writes it only while
        // it computes a request, and the server reads it only after.
        let map = unsafe { Mmap::map(&file)? };
        Ok(OutputSegment {
            file,
            map,
            resident: Resident::default(),
        })
    }

    /// The segment as the worker left it, for outputs that reach `needed`
    /// bytes into it: mapped again when they lie past the mapping and the
    /// worker grew the file. The file cannot shrink (it is sealed), so a
    /// mapping long enough needs no look at it: one `statx` less a
    /// request. The length is the file's own, never the worker's word, so
    /// a range the worker claims beyond it is refused, not a fault.
    pub(crate) fn contents(&mut self, needed: usize) -> io::Result<&[u8]> {
        if needed <= self.map.len() {
            return Ok(&self.map[..]);
        }
        let len = self.file.metadata()?.len() as usize;
        if len != self.map.len() {
            // SAFETY: as in `new`.
            self.map = unsafe { Mmap::map(&self.file)? };
        }
        Ok(&self.map[..])
    }

    /// After the server has read a request's outputs, `used` bytes: as
    /// for the input segment.
    pub(crate) fn settle(&mut self, used: usize) {
        self.resident.settle(&self.file, used);
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// The segment a model's calls of other models (BLS) cross: the worker
/// writes a call's tensors into it, the server reads them from it and
/// writes the answer's tensors there, where the worker's model reads them
/// for as long as it holds them (the worker places its next call past
/// them, `bls.rs` `call_through`). Either
/// side grows it; a call that has it waits for its answer, so the two
/// never use it at once. It stays grown (up to what [`Resident`] keeps)
/// between calls, as Triton's shared-memory pool does, so a large tensor
/// crosses into memory already in place rather than through the socket
/// into fresh pages on both sides.
pub(crate) struct CallSegment {
    file: File,
    map: MmapMut,
    resident: Resident,
}

impl CallSegment {
    pub(crate) fn new(name: &str) -> io::Result<CallSegment> {
        let file = memfd(name)?;
        // SAFETY: the file is a memfd only this server and its worker map;
        // the worker writes it only before it sends a call, and reads it
        // only after the answer: never while the server uses it.
        let map = unsafe { MmapMut::map_mut(&file)? };
        Ok(CallSegment {
            file,
            map,
            resident: Resident::default(),
        })
    }

    /// The segment as it is now, at least `len` bytes long: mapped again
    /// when the worker grew it, and grown (at least doubled) when it is
    /// shorter. The length is the file's own, never the worker's word, so
    /// a range the worker claims beyond it is refused, not a fault.
    pub(crate) fn reserve(&mut self, len: usize) -> io::Result<&mut [u8]> {
        let mut size = self.file.metadata()?.len() as usize;
        if len > size {
            size = len.max(size * 2);
            self.file.set_len(size as u64)?;
        }
        if size != self.map.len() {
            // SAFETY: as in `new`.
            self.map = unsafe { MmapMut::map_mut(&self.file)? };
        }
        Ok(&mut self.map[..])
    }

    /// After a call that used `used` bytes: as for the input segment.
    pub(crate) fn settle(&mut self, used: usize) {
        self.resident.settle(&self.file, used);
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_segments_grow_and_keep_their_contents() {
        let mut segment = InputSegment::new("test").unwrap();
        assert_eq!(segment.len(), INITIAL);
        segment.reserve(10).unwrap()[..3].copy_from_slice(b"abc");
        let big = segment.reserve(INITIAL * 3).unwrap();
        assert_eq!(&big[..3], b"abc");
        assert_eq!(segment.len(), INITIAL * 3);
        assert_eq!(aligned(1), 64);
        assert_eq!(aligned(64), 64);
        assert_eq!(aligned(0), 0);
    }

    #[test]
    fn a_large_requests_pages_are_given_back_after_it() {
        use std::os::unix::fs::MetadataExt;
        let mut segment = InputSegment::new("test").unwrap();
        let big = 32 << 20;
        segment.reserve(big).unwrap().fill(7);
        segment.settle(big);
        let resident = |s: &InputSegment| s.file.metadata().unwrap().blocks() * 512;
        assert!(resident(&segment) >= big as u64);
        segment.reserve(100).unwrap()[..100].fill(1);
        segment.settle(100);
        assert!(resident(&segment) <= KEEP as u64, "{}", resident(&segment));
        assert_eq!(segment.len(), big);
        let view = segment.reserve(big).unwrap();
        assert_eq!(
            (view[0], view[KEEP - 1], view[KEEP], view[big - 1]),
            (1, 7, 0, 0)
        );
    }

    #[test]
    fn segments_cannot_shrink() {
        let segment = InputSegment::new("test").unwrap();
        let error = segment.file.set_len(16).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EPERM));
        segment.file.set_len(INITIAL as u64 * 2).unwrap();
    }

    #[test]
    fn call_segments_follow_the_file_and_grow() {
        let mut segment = CallSegment::new("test").unwrap();
        assert_eq!(segment.reserve(0).unwrap().len(), INITIAL);
        // The worker grows it and writes: the server sees both.
        segment.file.set_len(INITIAL as u64 * 3).unwrap();
        // SAFETY: a test's own memfd, mapped twice as the two processes do.
        let mut theirs = unsafe { MmapMut::map_mut(&segment.file) }.unwrap();
        theirs[INITIAL * 2] = 9;
        let ours = segment.reserve(10).unwrap();
        assert_eq!((ours.len(), ours[INITIAL * 2]), (INITIAL * 3, 9));
        // The server grows it for an answer, at least doubled.
        ours[0] = 4;
        assert_eq!(segment.reserve(INITIAL * 4).unwrap().len(), INITIAL * 6);
        assert_eq!(theirs[0], 4);
    }

    #[test]
    fn output_segments_follow_the_file() {
        let mut segment = OutputSegment::new("test").unwrap();
        assert_eq!(segment.contents(0).unwrap().len(), INITIAL);
        segment.file.set_len(INITIAL as u64 * 2).unwrap();
        // Outputs inside the mapping read it as it is; past it, the
        // mapping follows the file.
        assert_eq!(segment.contents(INITIAL).unwrap().len(), INITIAL);
        assert_eq!(segment.contents(INITIAL + 1).unwrap().len(), INITIAL * 2);
    }
}
