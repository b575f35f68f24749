//! The shared heap: large tensor buffers allocated in one memory file that
//! the Python workers map too, so a request's input reaches a worker with
//! no copy past the one that decoded it.
//!
//! Without it, a tensor is decoded (from JSON, a binary body or gRPC's raw
//! contents) into the server's own memory, then copied into the worker's
//! input segment: for a 1 MB identity over gRPC, the second copy was
//! about 6% of the server's CPU an inference; for the 8 MiB tensor of the
//! 42.5 MB JSON request, most of the millisecond between the decode's end
//! and the model's start. Here a buffer of [`MIN_BYTES`] up to
//! [`MAX_BYTES`] that is asked for inside [`shareable`] (the typed tensors' buffers,
//! `TensorData::with_capacity`) is placed in the heap, and the keeper of a
//! Python worker ([`locate`]) sends the worker its offset instead of its
//! bytes. Any other allocation, and any allocation before [`start`] (the
//! Python backend starts the heap with its first model), is the system
//! allocator's.
//!
//! The heap is a `memfd` of [`RESERVE`] bytes, mapped shared once; only
//! the pages written are memory. The buffers are the global allocator's
//! ([`Allocator`], installed by the `wirespeed` binary), so a `Vec` in the
//! heap is an ordinary `Vec` to the rest of the server, and it comes back
//! here when dropped. The workers map the file read-only: a model can
//! read a tensor, never change one under the server.
//!
//! Free space is a fixed table of ranges outside the heap, first fit,
//! neighbours joined. Freed pages stay resident for the next request up
//! to [`KEEP`] bytes, as glibc keeps its arenas' tops (`malloc.rs`); a
//! freed block of [`GIVE_BACK`] or more, and whatever goes past [`KEEP`],
//! is given back to the kernel (`fallocate` punches the pages out: they
//! read as zeros in every process that maps them, and no mapping
//! faults).
//!
//! Hand-written because the arena allocators on crates.io (`talc`,
//! `linked_list_allocator`, `buddy_system_allocator`) keep their
//! bookkeeping inside the free memory itself, so pages could not be given
//! back without corrupting it, and none shares its memory with another
//! process. Unsafe code: `memfd_create`, `mmap` and `fallocate` (libc),
//! and the [`GlobalAlloc`] contract.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Buffers this large or larger go in the heap (inside [`shareable`]).
/// Smaller ones cost less to copy into a worker's segment than a page of
/// their own.
pub const MIN_BYTES: usize = 64 * 1024;

/// Buffers this large or larger are the system allocator's, as smaller
/// ones outside [`shareable`]: glibc maps each on its own and its pages are
/// faulted in afresh whichever way, and a worker would fault in its view of
/// them page by page too, where its input segment stays mapped (200 MB
/// BLS calls took 1.8x the time with them in the heap).
pub const MAX_BYTES: usize = 16 << 20;

/// The heap's address space: the most its buffers can hold at once. Only
/// pages written take memory; a buffer that does not fit is the system
/// allocator's, and is copied to a worker as before.
pub const RESERVE: usize = 64 << 30;

/// Freed bytes kept resident for the next buffers.
pub const KEEP: usize = 32 << 20;

/// A freed buffer this large gives its pages back at once (glibc maps such
/// a buffer on its own and unmaps it when freed, `malloc.rs`).
pub const GIVE_BACK: usize = 16 << 20;

/// Free ranges the table holds. Buffers of the heap are few (tensors in
/// flight), so their gaps are fewer still; when the table is full, a freed
/// buffer's pages are given back and its address space is not reused.
const RANGES: usize = 512;

thread_local! {
    static SHAREABLE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `make` with its large allocations placed in the shared heap, when
/// there is one.
pub fn shareable<R>(make: impl FnOnce() -> R) -> R {
    let before = SHAREABLE.with(|s| s.replace(true));
    let made = make();
    SHAREABLE.with(|s| s.set(before));
    made
}

fn wanted(layout: &Layout) -> bool {
    (MIN_BYTES..MAX_BYTES).contains(&layout.size())
        && SHAREABLE.try_with(Cell::get).unwrap_or(false)
}

/// One free range of the heap, by offset: its bytes, and how many of them
/// may still be resident (at most `len`).
#[derive(Debug, Clone, Copy, Default)]
struct Range {
    start: usize,
    len: usize,
    dirty: usize,
}

/// The free ranges, sorted by offset, none touching another.
#[derive(Debug)]
struct Ranges {
    free: [Range; RANGES],
    count: usize,
    /// The sum of the ranges' `dirty`.
    dirty: usize,
}

impl Ranges {
    fn new(len: usize) -> Ranges {
        let mut free = [Range::default(); RANGES];
        free[0] = Range {
            start: 0,
            len,
            dirty: 0,
        };
        Ranges {
            free,
            count: 1,
            dirty: 0,
        }
    }

    fn ranges(&self) -> &[Range] {
        &self.free[..self.count]
    }

    /// The offset of `size` bytes taken from the first range that holds
    /// them, at its start.
    fn take(&mut self, size: usize) -> Option<usize> {
        let i = self.ranges().iter().position(|r| r.len >= size)?;
        let start = self.free[i].start;
        self.take_front(i, size);
        Some(start)
    }

    /// Takes `extra` bytes from the free range that starts at `end`, if it
    /// holds them: a buffer ending there grows in place.
    fn extend(&mut self, end: usize, extra: usize) -> bool {
        let i = self.ranges().partition_point(|r| r.start < end);
        match self.ranges().get(i) {
            Some(r) if r.start == end && r.len >= extra => {}
            _ => return false,
        }
        self.take_front(i, extra);
        true
    }

    /// Takes the first `size` bytes of range `i` (which holds them).
    fn take_front(&mut self, i: usize, size: usize) {
        let range = &mut self.free[i];
        let dirty = range.dirty;
        range.start += size;
        range.len -= size;
        // Where in the range its resident bytes are is not kept: they are
        // taken to be its first ones, since blocks are taken from the
        // lowest offsets and so freed there too. (Taken to be anywhere,
        // the rest of a large range would seem to keep them, the count
        // would only grow, and every warm page would soon be given back.)
        range.dirty = dirty.saturating_sub(size);
        self.dirty -= dirty - range.dirty;
        if range.len == 0 {
            self.remove(i);
        }
    }

    /// Gives `len` bytes at `start` back, `dirty` of them resident, joined
    /// to the ranges beside them. False when the table is full (the bytes
    /// are then lost to the heap).
    fn give(&mut self, start: usize, len: usize, dirty: usize) -> bool {
        let i = self.ranges().partition_point(|r| r.start < start);
        let joins_before = i > 0 && {
            let before = self.free[i - 1];
            before.start + before.len == start
        };
        let joins_after = i < self.count && start + len == self.free[i].start;
        self.dirty += dirty;
        match (joins_before, joins_after) {
            (true, true) => {
                let after = self.free[i];
                let before = &mut self.free[i - 1];
                before.len += len + after.len;
                before.dirty += dirty + after.dirty;
                self.remove(i);
            }
            (true, false) => {
                let before = &mut self.free[i - 1];
                before.len += len;
                before.dirty += dirty;
            }
            (false, true) => {
                let after = &mut self.free[i];
                after.start = start;
                after.len += len;
                after.dirty += dirty;
            }
            (false, false) => {
                if self.count == RANGES {
                    self.dirty -= dirty;
                    return false;
                }
                self.free.copy_within(i..self.count, i + 1);
                self.free[i] = Range { start, len, dirty };
                self.count += 1;
            }
        }
        true
    }

    fn remove(&mut self, i: usize) {
        self.free.copy_within(i + 1..self.count, i);
        self.count -= 1;
    }

    /// The range with the most resident bytes, to give back.
    fn dirtiest(&mut self) -> Option<&mut Range> {
        self.free[..self.count]
            .iter_mut()
            .filter(|r| r.dirty > 0)
            .max_by_key(|r| r.dirty)
    }
}

#[cfg(target_os = "linux")]
mod heap {
    use super::*;
    use std::io;
    use std::os::fd::RawFd;
    use std::sync::{Mutex, OnceLock, PoisonError};

    pub(super) struct Heap {
        base: usize,
        len: usize,
        page: usize,
        fd: RawFd,
        ranges: Mutex<Ranges>,
    }

    pub(super) static HEAP: OnceLock<Heap> = OnceLock::new();

    /// Makes the process's heap, once.
    pub(super) fn start() -> io::Result<()> {
        if HEAP.get().is_some() {
            return Ok(());
        }
        // SAFETY: plain calls on a descriptor and a mapping made here.
        unsafe {
            let page = match libc::sysconf(libc::_SC_PAGESIZE) {
                size if size > 0 => size as usize,
                _ => return Err(io::Error::other("no page size")),
            };
            let fd = libc::memfd_create(c"wirespeed-heap".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let fail = |fd| {
                let e = io::Error::last_os_error();
                libc::close(fd);
                Err(e)
            };
            if libc::ftruncate(fd, RESERVE as libc::off_t) < 0 {
                return fail(fd);
            }
            let base = libc::mmap(
                std::ptr::null_mut(),
                RESERVE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd,
                0,
            );
            if base == libc::MAP_FAILED {
                return fail(fd);
            }
            let heap = Heap {
                base: base as usize,
                len: RESERVE,
                page,
                fd,
                ranges: Mutex::new(Ranges::new(RESERVE)),
            };
            if let Err(lost) = HEAP.set(heap) {
                // Another thread made one first.
                libc::munmap(lost.base as *mut libc::c_void, lost.len);
                libc::close(lost.fd);
            }
        }
        Ok(())
    }

    impl Heap {
        pub(super) fn fd(&self) -> RawFd {
            self.fd
        }

        pub(super) fn owns(&self, ptr: *const u8) -> bool {
            (ptr as usize).wrapping_sub(self.base) < self.len
        }

        pub(super) fn offset(&self, ptr: *const u8, len: usize) -> Option<usize> {
            let offset = (ptr as usize).checked_sub(self.base)?;
            (offset.checked_add(len)? <= self.len).then_some(offset)
        }

        fn pages(&self, size: usize) -> Option<usize> {
            size.checked_next_multiple_of(self.page)
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, Ranges> {
            self.ranges.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// A block for `layout`, or null when it does not fit.
        pub(super) fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.align() > self.page {
                return std::ptr::null_mut();
            }
            let Some(size) = self.pages(layout.size().max(1)) else {
                return std::ptr::null_mut();
            };
            match self.lock().take(size) {
                Some(offset) => (self.base + offset) as *mut u8,
                None => std::ptr::null_mut(),
            }
        }

        /// Gives back the block of `size` bytes at `ptr`.
        pub(super) fn free(&self, ptr: *mut u8, size: usize) {
            let Some(len) = self.pages(size.max(1)) else {
                return;
            };
            let start = ptr as usize - self.base;
            let mut ranges = self.lock();
            let dirty = if len >= GIVE_BACK {
                self.punch(start, len);
                0
            } else {
                len
            };
            if !ranges.give(start, len, dirty) {
                self.punch(start, len);
                return;
            }
            while ranges.dirty > KEEP {
                let Some(range) = ranges.dirtiest() else {
                    break;
                };
                let (at, len, was) = (range.start, range.len, range.dirty);
                range.dirty = 0;
                ranges.dirty -= was;
                self.punch(at, len);
            }
        }

        /// Resizes the block at `ptr` in place, when it can: a shrink gives
        /// back its tail's pages, a growth takes the free pages after it.
        pub(super) fn resize(&self, ptr: *mut u8, old: usize, new: usize) -> bool {
            let (Some(old), Some(new)) = (self.pages(old.max(1)), self.pages(new.max(1))) else {
                return false;
            };
            let start = ptr as usize - self.base;
            match new.cmp(&old) {
                std::cmp::Ordering::Equal => true,
                std::cmp::Ordering::Less => {
                    self.free((self.base + start + new) as *mut u8, old - new);
                    true
                }
                std::cmp::Ordering::Greater => self.lock().extend(start + old, new - old),
            }
        }

        /// Gives the pages of `len` bytes at `start` back to the kernel.
        fn punch(&self, start: usize, len: usize) {
            // SAFETY: a hole punched in our own file; the range is free,
            // so no buffer of the server's is in it.
            unsafe {
                libc::fallocate(
                    self.fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    start as libc::off_t,
                    len as libc::off_t,
                );
            }
        }
    }
}

/// Makes the process's shared heap (once; later calls do nothing). Until
/// it is made, and where it cannot be (not Linux), every buffer is the
/// system allocator's.
pub fn start() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    return heap::start();
    #[cfg(not(target_os = "linux"))]
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "a shared heap needs Linux",
    ))
}

/// Whether [`Allocator`] is the process's global allocator, as the
/// `wirespeed` binary installs it (tests and other programs that link
/// this crate may not): found once the heap is made, from where a
/// [`shareable`] buffer lands; false before. Lent buffers (`lent.rs`)
/// need it.
pub fn installed() -> bool {
    static INSTALLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    #[cfg(target_os = "linux")]
    if heap::HEAP.get().is_some() {
        return *INSTALLED.get_or_init(|| {
            let probe = shareable(|| Vec::<u8>::with_capacity(MIN_BYTES));
            heap_of(probe.as_ptr()).is_some()
        });
    }
    INSTALLED.get().copied().unwrap_or(false)
}

/// The heap's file, for a worker to map, once [`start`] has made it.
pub fn fd() -> Option<std::os::fd::RawFd> {
    #[cfg(target_os = "linux")]
    return heap::HEAP.get().map(heap::Heap::fd);
    #[cfg(not(target_os = "linux"))]
    None
}

/// Where `bytes` lie in the heap (their offset in its file), when they
/// all do.
pub fn locate(bytes: &[u8]) -> Option<usize> {
    #[cfg(target_os = "linux")]
    return heap::HEAP.get()?.offset(bytes.as_ptr(), bytes.len());
    #[cfg(not(target_os = "linux"))]
    None
}

/// The server's global allocator: the system's, with [`shareable`]'s
/// large buffers in the shared heap.
pub struct Allocator;

#[cfg(target_os = "linux")]
fn heap_of(ptr: *const u8) -> Option<&'static heap::Heap> {
    heap::HEAP.get().filter(|h| h.owns(ptr))
}

#[cfg(not(target_os = "linux"))]
fn heap_of(_: *const u8) -> Option<&'static Never> {
    None
}

#[cfg(not(target_os = "linux"))]
enum Never {}

#[cfg(not(target_os = "linux"))]
impl Never {
    fn alloc(&self, _: Layout) -> *mut u8 {
        match *self {}
    }
    fn free(&self, _: *mut u8, _: usize) {
        match *self {}
    }
    fn resize(&self, _: *mut u8, _: usize, _: usize) -> bool {
        match *self {}
    }
}

/// A block of the heap for `layout`, when it is wanted there and fits.
fn heap_alloc(layout: Layout) -> *mut u8 {
    if !wanted(&layout) {
        return std::ptr::null_mut();
    }
    #[cfg(target_os = "linux")]
    if let Some(heap) = heap::HEAP.get() {
        return heap.alloc(layout);
    }
    std::ptr::null_mut()
}

// SAFETY: every block is the system allocator's, the heap's or lent
// (`lent.rs`: a region's, never the system allocator's), and goes back to
// the one it came from (`heap_of` and the regions tell them apart by
// address);
// the heap's blocks are page-aligned, so any alignment up to a page is
// met, and larger ones are never placed there.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let placed = heap_alloc(layout);
        if !placed.is_null() {
            return placed;
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let placed = heap_alloc(layout);
        if !placed.is_null() {
            // SAFETY: a block of at least `layout.size()` bytes, ours.
            unsafe { placed.write_bytes(0, layout.size()) };
            return placed;
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match heap_of(ptr) {
            Some(heap) => heap.free(ptr, layout.size()),
            // A lent buffer goes back to its region's owner.
            None if layout.size() >= crate::lent::MIN_BYTES && crate::lent::give_back(ptr) => {}
            // SAFETY: a block of the system allocator's, as the caller
            // says it was allocated.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        if heap_of(ptr).is_none()
            && layout.size() >= crate::lent::MIN_BYTES
            && crate::lent::lent(ptr)
        {
            // A lent buffer that changes size moves out into a block of
            // the server's own, and goes back to its owner.
            let placed = heap_alloc(new_layout);
            // SAFETY: the caller's contract, for a new block.
            let placed = if placed.is_null() {
                unsafe { System.alloc(new_layout) }
            } else {
                placed
            };
            if !placed.is_null() {
                // SAFETY: both blocks hold at least the bytes copied, and
                // do not overlap (the new one is the allocator's).
                unsafe { std::ptr::copy_nonoverlapping(ptr, placed, layout.size().min(new_size)) };
                crate::lent::give_back(ptr);
            }
            return placed;
        }
        let Some(heap) = heap_of(ptr) else {
            // A buffer that grows into the heap's sizes inside
            // `shareable` moves there; the copy is the one a reallocation
            // makes anyway.
            let placed = heap_alloc(new_layout);
            if placed.is_null() {
                // SAFETY: the caller's contract, passed on.
                return unsafe { System.realloc(ptr, layout, new_size) };
            }
            // SAFETY: both blocks hold at least the bytes copied; the old
            // one is the system allocator's.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, placed, layout.size().min(new_size));
                System.dealloc(ptr, layout);
            }
            return placed;
        };
        if new_size < MAX_BYTES && heap.resize(ptr, layout.size(), new_size) {
            return ptr;
        }
        let mut placed = if new_size < MAX_BYTES {
            heap.alloc(new_layout)
        } else {
            std::ptr::null_mut()
        };
        if placed.is_null() {
            // SAFETY: the caller's contract, for a new block.
            placed = unsafe { System.alloc(new_layout) };
            if placed.is_null() {
                return placed;
            }
        }
        // SAFETY: both blocks hold at least the bytes copied, and do not
        // overlap (the new one was free).
        unsafe { std::ptr::copy_nonoverlapping(ptr, placed, layout.size().min(new_size)) };
        heap.free(ptr, layout.size());
        placed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(r: &Ranges) {
        let mut dirty = 0;
        for pair in r.ranges().windows(2) {
            assert!(
                pair[0].start + pair[0].len < pair[1].start,
                "{:?} touches {:?}",
                pair[0],
                pair[1]
            );
        }
        for range in r.ranges() {
            assert!(range.len > 0 && range.dirty <= range.len, "{range:?}");
            dirty += range.dirty;
        }
        assert_eq!(dirty, r.dirty);
    }

    #[test]
    fn blocks_taken_and_given_back_in_any_order_leave_one_range() {
        let mut r = Ranges::new(1 << 20);
        let sizes = [4096, 8192, 4096 * 5, 4096, 65536, 4096 * 3];
        let taken: Vec<(usize, usize)> = sizes.iter().map(|&s| (r.take(s).unwrap(), s)).collect();
        // First fit from the start: the blocks lie one after another.
        let mut at = 0;
        for &(offset, size) in &taken {
            assert_eq!(offset, at);
            at += size;
        }
        check(&r);
        for &i in &[3, 0, 5, 1, 4, 2] {
            let (offset, size) = taken[i];
            assert!(r.give(offset, size, size));
            check(&r);
        }
        assert_eq!(r.ranges().len(), 1);
        assert_eq!((r.free[0].start, r.free[0].len), (0, 1 << 20));
        assert_eq!(r.dirty, sizes.iter().sum::<usize>());
    }

    #[test]
    fn a_gap_is_reused_and_a_block_grows_into_free_space_only() {
        let mut r = Ranges::new(100 * 4096);
        let a = r.take(4 * 4096).unwrap();
        let b = r.take(4 * 4096).unwrap();
        let c = r.take(4 * 4096).unwrap();
        assert!(r.give(b, 4 * 4096, 4 * 4096));
        // First fit: the gap b left, not the end.
        assert_eq!(r.take(2 * 4096), Some(b));
        // a cannot grow into b's first half, taken again; b's second half
        // is free, so the block at b grows into it, and no further.
        assert!(!r.extend(a + 4 * 4096, 4096));
        assert!(r.extend(b + 2 * 4096, 2 * 4096));
        assert!(!r.extend(b + 4 * 4096, 4096));
        // c grows into the end.
        assert!(r.extend(c + 4 * 4096, 10 * 4096));
        check(&r);
        assert_eq!(r.take(200 * 4096), None);
    }

    #[test]
    fn blocks_taken_again_where_they_were_freed_keep_the_resident_count_steady() {
        // Four requests' tensors in flight, over and over: the pages they
        // free are the ones the next take, and the count of resident free
        // bytes stays at what was freed last, not the sum of every free.
        let mut r = Ranges::new(1 << 40);
        for _ in 0..1000 {
            let blocks: Vec<usize> = (0..4).map(|_| r.take(1 << 20).unwrap()).collect();
            for b in blocks {
                assert!(r.give(b, 1 << 20, 1 << 20));
            }
            check(&r);
            assert!(r.dirty <= 4 << 20, "{}", r.dirty);
        }
    }

    #[test]
    fn a_full_table_refuses_a_range_it_cannot_join() {
        let mut r = Ranges::new(4096 * (2 * RANGES + 4));
        let blocks: Vec<usize> = (0..2 * RANGES + 2).map(|_| r.take(4096).unwrap()).collect();
        // Every other block given back: gaps that join nothing.
        let mut refused = 0;
        for &b in blocks.iter().step_by(2) {
            if !r.give(b, 4096, 4096) {
                refused += 1;
            }
        }
        check(&r);
        assert_eq!(r.count, RANGES);
        assert!(refused > 0);
        // A block beside a free range still joins it.
        assert!(r.give(blocks[1], 4096, 0));
        check(&r);
    }

    #[test]
    fn random_blocks_never_overlap_and_the_bookkeeping_holds() {
        let mut r = Ranges::new(4096 * 4096);
        let mut live: Vec<(usize, usize)> = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let roll = next();
            if roll % 3 != 0 || live.is_empty() {
                let size = 4096 * (1 + (next() % 64) as usize);
                if let Some(offset) = r.take(size) {
                    live.push((offset, size));
                }
            } else {
                let (offset, size) = live.swap_remove((next() as usize) % live.len());
                let dirty = if roll % 2 == 0 { size } else { 0 };
                r.give(offset, size, dirty);
            }
            if roll % 7 == 0 {
                if let Some(&(offset, size)) = live.last() {
                    if r.extend(offset + size, 4096) {
                        live.last_mut().unwrap().1 += 4096;
                    }
                }
            }
        }
        check(&r);
        live.sort();
        for pair in live.windows(2) {
            assert!(pair[0].0 + pair[0].1 <= pair[1].0, "{pair:?}");
        }
        // Live blocks and free ranges cover the heap exactly once.
        let free: usize = r.ranges().iter().map(|f| f.len).sum();
        let used: usize = live.iter().map(|l| l.1).sum();
        assert_eq!(free + used, 4096 * 4096);
        for f in r.ranges() {
            for l in &live {
                assert!(l.0 + l.1 <= f.start || f.start + f.len <= l.0);
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn shareable_buffers_live_in_the_heap_and_others_do_not() {
        start().unwrap();
        let heap = heap::HEAP.get().unwrap();
        let alloc = Allocator;
        let big = Layout::from_size_align(1 << 20, 64).unwrap();
        let small = Layout::from_size_align(1024, 8).unwrap();
        // SAFETY: blocks allocated and freed with their layouts.
        unsafe {
            let outside = alloc.alloc(big);
            assert!(!heap.owns(outside));
            let (inside, tiny) = shareable(|| (alloc.alloc(big), alloc.alloc(small)));
            assert!(heap.owns(inside));
            assert!(!heap.owns(tiny));
            assert_eq!(inside as usize % 4096, 0);
            inside.write_bytes(7, big.size());
            let bytes = std::slice::from_raw_parts(inside, big.size());
            assert!(locate(bytes).is_some());
            assert!(locate(std::slice::from_raw_parts(outside, 16)).is_none());
            // Grown, still in the heap, with its bytes.
            let grown = alloc.realloc(inside, big, 3 << 20);
            assert!(heap.owns(grown));
            assert_eq!(*grown.add(big.size() - 1), 7);
            // A system buffer that grows inside `shareable` moves in.
            let moved = shareable(|| alloc.realloc(outside, big, 2 << 20));
            assert!(heap.owns(moved));
            // Past the heap's largest size it moves out, with its bytes.
            let out = alloc.realloc(
                grown,
                Layout::from_size_align(3 << 20, 64).unwrap(),
                MAX_BYTES,
            );
            assert!(!heap.owns(out));
            assert_eq!(*out.add(big.size() - 1), 7);
            let huge = Layout::from_size_align(MAX_BYTES, 64).unwrap();
            let outside_too = shareable(|| alloc.alloc(huge));
            assert!(!heap.owns(outside_too));
            alloc.dealloc(outside_too, huge);
            alloc.dealloc(out, huge);
            alloc.dealloc(moved, Layout::from_size_align(2 << 20, 64).unwrap());
            alloc.dealloc(tiny, small);
            let zeroed = shareable(|| alloc.alloc_zeroed(big));
            assert!(std::slice::from_raw_parts(zeroed, big.size())
                .iter()
                .all(|&b| b == 0));
            alloc.dealloc(zeroed, big);
        }
    }
}
