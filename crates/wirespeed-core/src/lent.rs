//! Lent buffers: a tensor's elements left where another process wrote
//! them (a Python worker's output segment), in a `Vec` that the rest of
//! the server uses as any other, given back to the memory's owner when it
//! is dropped.
//!
//! Without it, a worker's output is copied from its segment into a fresh
//! buffer before the response is encoded: for a 200 MB output, a fresh
//! mapping faulted in and zeroed, and a copy, on the way to a copy into
//! the response. Here an owner maps its memory once, for good (a
//! [`Region`]: the mapping never moves, so a lent buffer stays valid),
//! and [`Region::tensor`] makes a `TensorData` whose `Vec` points into
//! it. The server's global allocator ([`crate::shared_heap::Allocator`])
//! knows the regions: a lent buffer's `dealloc` tells the owner
//! ([`Lender::give_back`]), and a `realloc` moves the elements out into
//! an allocation of its own first. A region stays registered, and mapped,
//! until its owner is gone and every buffer lent from it is back.
//!
//! Only where that allocator is the global one ([`crate::shared_heap::installed`])
//! does a region lend anything: elsewhere a lent `Vec` would be freed by
//! the system allocator. Only buffers of [`MIN_BYTES`] or more are lent
//! (a smaller one costs less to copy than to account for), so the
//! allocator looks a freed block up here only at that size, and only
//! fixed-size types whose every bit pattern is a value (not BOOL, whose
//! bytes must be 0 or 1, nor BYTES).
//!
//! Hand-written because no allocator crate lends memory it did not
//! allocate. Unsafe code: `Vec::from_raw_parts` on memory of a region,
//! under the allocator's contract above.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use crate::{DataType, TensorData};

/// Buffers this large or larger are lent; smaller ones are copied.
pub const MIN_BYTES: usize = crate::shared_heap::MIN_BYTES;

/// The owner of a region's memory, told when a buffer it lent comes back.
pub trait Lender: Send + Sync {
    /// The buffer that started `offset` bytes into the region is back.
    fn give_back(&self, offset: usize);
}

struct Entry {
    base: usize,
    len: usize,
    lender: Arc<dyn Lender>,
    /// Buffers lent and not back yet.
    loans: Arc<AtomicUsize>,
    /// Its `Region` is dropped: removed when the last loan is back.
    retired: bool,
}

/// The regions, few (one per Python instance), looked up by address. A
/// `RwLock` that allocates nothing to lock: the allocator takes it.
static REGIONS: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// Mapped memory that lends its elements as tensors: registered while it
/// lives, and after until every loan is back.
pub struct Region {
    base: usize,
    len: usize,
    loans: Arc<AtomicUsize>,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("len", &self.len)
            .field("loans", &self.loans.load(Ordering::Relaxed))
            .finish()
    }
}

impl Region {
    /// Registers the `len` bytes at `base`, which `lender` keeps mapped
    /// at that address for as long as it lives; `None` where lent buffers
    /// cannot be given back (the server's allocator is not the global one).
    ///
    /// # Safety
    ///
    /// `base..base + len` stays mapped, readable and writable, while
    /// `lender` lives, and nothing else allocates there.
    pub unsafe fn new(base: *mut u8, len: usize, lender: Arc<dyn Lender>) -> Option<Region> {
        if !crate::shared_heap::installed() {
            return None;
        }
        let loans = Arc::new(AtomicUsize::new(0));
        let entry = Entry {
            base: base as usize,
            len,
            lender,
            loans: Arc::clone(&loans),
            retired: false,
        };
        // The table grows outside the lock: a freed buffer of its own
        // would otherwise be looked up here while the lock is held.
        let mut spare: Vec<Entry> = Vec::new();
        loop {
            let mut regions = REGIONS.write().unwrap_or_else(|e| e.into_inner());
            if regions.len() == regions.capacity() && spare.capacity() > regions.len() {
                spare.extend(regions.drain(..));
                std::mem::swap(&mut *regions, &mut spare);
            }
            if regions.len() < regions.capacity() {
                regions.push(entry);
                break;
            }
            let want = (regions.capacity() * 2).max(16);
            drop(regions);
            spare = Vec::with_capacity(want);
        }
        drop(spare);
        Some(Region {
            base: base as usize,
            len,
            loans,
        })
    }

    /// The `len` bytes `offset` into the region as a tensor of
    /// `datatype`, lent: `None` when the type is not lent (BOOL, BYTES),
    /// the bytes are fewer than [`MIN_BYTES`], are not a whole number of
    /// elements, are not aligned for them, or lie outside the region.
    ///
    /// # Safety
    ///
    /// Nothing writes those bytes until the lender is told they are back
    /// ([`Lender::give_back`] with `offset`), but through the tensor.
    pub unsafe fn tensor(
        &self,
        datatype: DataType,
        offset: usize,
        len: usize,
    ) -> Option<TensorData> {
        if len < MIN_BYTES || offset.checked_add(len)? > self.len {
            return None;
        }
        let size = datatype.element_size()?;
        let ptr = (self.base + offset) as *mut u8;
        let count = len / size;
        if count * size != len || !(ptr as usize).is_multiple_of(size) {
            return None;
        }
        /// A `Vec` of `count` `T`s at `ptr`.
        ///
        /// SAFETY (of the callers): `ptr` is aligned for `T` and `count`
        /// elements lie in the region; every bit pattern is a `T`.
        unsafe fn lent<T: bytemuck::Pod>(ptr: *mut u8, count: usize) -> Vec<T> {
            // SAFETY: as the callers say; the allocator takes the buffer
            // back to the region (`give_back`).
            unsafe { Vec::from_raw_parts(ptr.cast::<T>(), count, count) }
        }
        self.loans.fetch_add(1, Ordering::AcqRel);
        // SAFETY: aligned and inside the region (checked above), and the
        // types below are plain numbers.
        Some(unsafe {
            match datatype {
                DataType::Uint8 => TensorData::Uint8(lent(ptr, count)),
                DataType::Uint16 => TensorData::Uint16(lent(ptr, count)),
                DataType::Uint32 => TensorData::Uint32(lent(ptr, count)),
                DataType::Uint64 => TensorData::Uint64(lent(ptr, count)),
                DataType::Int8 => TensorData::Int8(lent(ptr, count)),
                DataType::Int16 => TensorData::Int16(lent(ptr, count)),
                DataType::Int32 => TensorData::Int32(lent(ptr, count)),
                DataType::Int64 => TensorData::Int64(lent(ptr, count)),
                DataType::Fp16 => TensorData::Fp16(lent(ptr, count)),
                DataType::Fp32 => TensorData::Fp32(lent(ptr, count)),
                DataType::Fp64 => TensorData::Fp64(lent(ptr, count)),
                DataType::Bf16 => TensorData::Bf16(lent(ptr, count)),
                DataType::Bool | DataType::Bytes => {
                    self.loans.fetch_sub(1, Ordering::AcqRel);
                    return None;
                }
            }
        })
    }

    /// Buffers lent and not back yet.
    pub fn loans(&self) -> usize {
        self.loans.load(Ordering::Acquire)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let mut regions = REGIONS.write().unwrap_or_else(|e| e.into_inner());
        let removed = regions
            .iter()
            .position(|e| e.base == self.base)
            .and_then(|at| {
                if regions[at].loans.load(Ordering::Acquire) == 0 {
                    Some(regions.swap_remove(at))
                } else {
                    regions[at].retired = true;
                    None
                }
            });
        drop(regions);
        // Its lender, and the mapping, may go here: outside the lock.
        drop(removed);
    }
}

/// Whether `ptr` is a buffer some region lent.
pub(crate) fn lent(ptr: *const u8) -> bool {
    let regions = REGIONS.read().unwrap_or_else(|e| e.into_inner());
    let at = ptr as usize;
    regions.iter().any(|e| at.wrapping_sub(e.base) < e.len)
}

/// Gives a lent buffer back to its region's lender: whether `ptr` was
/// one. The allocator's `dealloc`, for blocks of [`MIN_BYTES`] or more.
pub(crate) fn give_back(ptr: *const u8) -> bool {
    let at = ptr as usize;
    let found = {
        let regions = REGIONS.read().unwrap_or_else(|e| e.into_inner());
        regions
            .iter()
            .find(|e| at.wrapping_sub(e.base) < e.len)
            .map(|e| (e.base, Arc::clone(&e.lender), Arc::clone(&e.loans)))
    };
    let Some((base, lender, loans)) = found else {
        return false;
    };
    lender.give_back(at - base);
    if loans.fetch_sub(1, Ordering::AcqRel) == 1 {
        // The last loan: a retired region goes now.
        let mut regions = REGIONS.write().unwrap_or_else(|e| e.into_inner());
        let removed = regions
            .iter()
            .position(|e| e.base == base && e.retired && e.loans.load(Ordering::Acquire) == 0)
            .map(|i| regions.swap_remove(i));
        drop(regions);
        drop(removed);
    }
    // The lender's last handle may go here, with the region's mapping,
    // outside the lock.
    drop(lender);
    true
}
