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

use std::sync::{Arc, Mutex};

use memmap2::{MmapMut, MmapOptions, MmapRaw};
use wirespeed_core::lent::{Lender, Region};
use wirespeed_core::{DataType, TensorData};

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

/// The address space an output segment is mapped in, once: a worker's
/// outputs of one request (one batch) may take this much (a quarter, or
/// less, where the address space is limited).
pub(crate) const OUTPUT_RESERVE: usize = 16 << 30;

/// The segment a worker writes a request's outputs into, and grows itself.
///
/// Mapped once, over [`OUTPUT_RESERVE`] bytes (only the file's pages are
/// memory), so it never moves: its large outputs are lent to the server
/// where the worker wrote them (`wirespeed_core::lent`), and stay there
/// until the last tensor holding one is dropped, after the response went
/// out, however many requests later. The worker places each request's
/// outputs around them ([`OutputSegment::place`]).
pub(crate) struct OutputSegment {
    file: File,
    /// The mapping and the places lent from it, shared with the region.
    held: Arc<Held>,
    region: Option<Region>,
    /// The file's length as last seen.
    len: usize,
    /// The mapping's length, [`OUTPUT_RESERVE`] unless the address
    /// space is limited.
    reserve: usize,
    resident: Resident,
}

/// Where a worker may write a request's outputs: at `at` when they fit in
/// `room` bytes (all that is left when `None`), else past `held`, where
/// the places lent end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Placement {
    pub(crate) at: usize,
    pub(crate) room: Option<usize>,
    pub(crate) held: usize,
}

/// An output segment's mapping and the byte ranges lent from it, sorted.
struct Held {
    map: MmapRaw,
    places: Mutex<Vec<(usize, usize)>>,
}

impl Lender for Held {
    fn give_back(&self, offset: usize) {
        let mut places = self.places.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = places.iter().position(|p| p.0 == offset) {
            places.remove(i);
        }
    }
}

impl OutputSegment {
    pub(crate) fn new(name: &str) -> io::Result<OutputSegment> {
        let file = memfd(name)?;
        // Less where the address space is limited (`ulimit -v`): a
        // request's outputs may then take less.
        let mut reserve = OUTPUT_RESERVE;
        let map = loop {
            match MmapOptions::new().len(reserve).map_raw(&file) {
                Ok(map) => break map,
                Err(_) if reserve > 64 << 20 => reserve /= 4,
                Err(e) => return Err(e),
            }
        };
        let held = Arc::new(Held {
            map,
            places: Mutex::new(Vec::new()),
        });
        // SAFETY: the mapping lives as long as `held`, which the region
        // keeps; the system allocator never places anything in it.
        let region = unsafe {
            Region::new(
                held.map.as_mut_ptr(),
                reserve,
                Arc::clone(&held) as Arc<dyn Lender>,
            )
        };
        Ok(OutputSegment {
            file,
            held,
            region,
            len: INITIAL,
            reserve,
            resident: Resident::default(),
        })
    }

    /// Follows the file for outputs that reach `needed` bytes into the
    /// segment: looks at its length only when they reach past the length
    /// last seen (it cannot shrink: it is sealed). The length is the
    /// file's own, never the worker's word, so a range the worker claims
    /// beyond it is refused ([`bytes`](Self::bytes)), not a fault.
    pub(crate) fn reach(&mut self, needed: usize) -> io::Result<()> {
        if needed > self.len {
            self.len = (self.file.metadata()?.len() as usize).min(self.reserve);
        }
        if needed > self.reserve {
            return Err(io::Error::other(format!(
                "its outputs take {needed} bytes, more than the {} an instance's output segment \
                 holds",
                self.reserve
            )));
        }
        Ok(())
    }

    /// The `len` bytes `offset` into the segment, when they lie in the
    /// file as last [`reach`](Self::reach)ed and in no lent place.
    pub(crate) fn bytes(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len).filter(|&end| end <= self.len)?;
        if self.overlaps_held(offset, end) {
            return None;
        }
        // SAFETY: inside the mapping and the file; the worker wrote it
        // before it answered and writes nothing until the next request,
        // and no lent tensor covers it.
        Some(unsafe { std::slice::from_raw_parts(self.held.map.as_ptr().add(offset), len) })
    }

    /// The `len` bytes `offset` into the segment as a tensor of
    /// `datatype`, lent where they lie: `None` when they are not lent
    /// (small, not a lent type, outside the file, in a place already lent,
    /// or the server's allocator is not the global one), to be copied.
    pub(crate) fn lend(&self, datatype: DataType, offset: usize, len: usize) -> Option<TensorData> {
        let region = self.region.as_ref()?;
        let end = offset.checked_add(len).filter(|&end| end <= self.len)?;
        let mut places = self.held.places.lock().unwrap_or_else(|e| e.into_inner());
        if overlaps(&places, offset, end) {
            return None;
        }
        // SAFETY: the worker writes no place the server holds (it places
        // outputs as `place` says), and this one is held until the tensor
        // gives it back.
        let tensor = unsafe { region.tensor(datatype, offset, len)? };
        let at = places.partition_point(|p| p.0 < offset);
        places.insert(at, (offset, end));
        Some(tensor)
    }

    fn overlaps_held(&self, from: usize, to: usize) -> bool {
        let places = self.held.places.lock().unwrap_or_else(|e| e.into_inner());
        overlaps(&places, from, to)
    }

    /// Where the worker may write the next request's outputs: the lowest
    /// place past none held, the room up to the next held one, and where
    /// the held ones end.
    pub(crate) fn place(&self) -> Placement {
        let places = self.held.places.lock().unwrap_or_else(|e| e.into_inner());
        placement(&places)
    }

    /// After the server has read a request's outputs, `used` bytes: as
    /// for the input segment, never past a place still lent.
    pub(crate) fn settle(&mut self, used: usize) {
        let held = self.place().held;
        self.resident.settle(&self.file, used.max(held));
    }

    /// Tensors lent and not back yet.
    #[cfg(test)]
    fn loans(&self) -> usize {
        self.region.as_ref().map_or(0, Region::loans)
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Whether `from..to` overlaps a place of `places`.
fn overlaps(places: &[(usize, usize)], from: usize, to: usize) -> bool {
    places.iter().any(|&(start, end)| start < to && from < end)
}

/// The lowest aligned place below, between or past `places` (sorted,
/// apart), the room there, and where the last ends.
fn placement(places: &[(usize, usize)]) -> Placement {
    let held = places.last().map_or(0, |p| aligned(p.1));
    let mut at = 0;
    for &(start, end) in places {
        if start > at {
            return Placement {
                at,
                room: Some(start - at),
                held,
            };
        }
        at = at.max(aligned(end));
    }
    Placement {
        at,
        room: None,
        held,
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
        assert!(segment.reach(INITIAL).is_ok());
        assert!(segment.bytes(INITIAL - 1, 2).is_none());
        // The worker grows it and writes past where it was.
        segment.file.set_len(INITIAL as u64 * 2).unwrap();
        // SAFETY: a test's own memfd, mapped twice as the two processes do.
        let mut theirs = unsafe { MmapMut::map_mut(&segment.file) }.unwrap();
        theirs[INITIAL + 1] = 7;
        segment.reach(INITIAL + 2).unwrap();
        assert_eq!(segment.bytes(INITIAL, 2).unwrap(), &[0, 7]);
        // A range the worker claims past the file is refused.
        segment.reach(INITIAL * 2 + 1).unwrap();
        assert!(segment.bytes(INITIAL * 2, 1).is_none());
        let huge = segment.reach(OUTPUT_RESERVE + 1).unwrap_err().to_string();
        assert!(huge.contains("more than the 17179869184"), "{huge}");
        // Without the server's allocator (a test's), nothing is lent.
        assert!(segment.lend(DataType::Fp32, 0, INITIAL).is_none());
        assert_eq!(segment.loans(), 0);
    }

    #[test]
    fn outputs_are_placed_in_the_lowest_gap_between_held_places() {
        let none = placement(&[]);
        assert_eq!(
            none,
            Placement {
                at: 0,
                room: None,
                held: 0
            }
        );
        // One held at the start: past it, to the end.
        assert_eq!(
            placement(&[(0, 100)]),
            Placement {
                at: 128,
                room: None,
                held: 128
            }
        );
        // A gap before the first, between two, and after.
        assert_eq!(
            placement(&[(256, 300)]),
            Placement {
                at: 0,
                room: Some(256),
                held: 320
            }
        );
        assert_eq!(
            placement(&[(0, 64), (64, 130), (512, 1000)]),
            Placement {
                at: 192,
                room: Some(320),
                held: 1024
            }
        );
        // Two that leave no aligned room between them.
        assert_eq!(
            placement(&[(0, 10), (64, 65)]),
            Placement {
                at: 128,
                room: None,
                held: 128
            }
        );
        assert!(overlaps(&[(64, 128)], 100, 200));
        assert!(!overlaps(&[(64, 128)], 128, 200));
        assert!(!overlaps(&[(64, 128)], 0, 64));
    }
}
