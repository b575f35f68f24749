//! Fresh pages made resident in one call before a large buffer is filled.
//!
//! A buffer of [`FRESH`] bytes or more is mapped fresh by the allocator
//! (glibc maps such a block on its own; the server's `malloc.rs` sets the
//! threshold there), and each of its pages then faults in on its first
//! write: a trap per 4 KiB, which on a virtual machine costs more than
//! the copy that follows (filling 200 MB: 113 ms; with the pages made
//! resident first, `MADV_POPULATE_WRITE`, 69 ms). A tensor the server
//! fills whole at once (its raw bytes from a request, a worker's segment,
//! a BLS call) asks for its pages here. A kernel without
//! `MADV_POPULATE_WRITE` (before Linux 5.14) refuses it, and the pages
//! fault in as they are written, as before.
//!
//! Such a buffer asks for transparent huge pages first (`MADV_HUGEPAGE`,
//! as numpy does for its arrays of 4 MiB and more): with the kernel's
//! usual `enabled = madvise`, the buffer is then made of 2 MiB pages, one
//! fault and one zeroing each rather than 512. Four BLS calls of 200 MB
//! through a Python identity took 1.06 s against 1.53 s with 4 KiB pages
//! (`benchmarks/scripts/bls_large.py --rounds 5`, medians, both builds in
//! one run; the real Triton 1.07 s). A kernel without huge pages, or set
//! to `never`, refuses or ignores the advice.
//!
//! Unsafe code: `madvise` on the pages of a buffer we own (libc); no
//! crate makes this one call.

#![allow(unsafe_code)]

/// Buffers this large are made resident before they are filled.
pub(crate) const FRESH: usize = 16 << 20;

/// Makes the whole pages of `len` bytes at `start` resident, when `len` is
/// at least [`FRESH`]: the spare capacity of a buffer about to be filled.
pub(crate) fn populate(start: *const u8, len: usize) {
    if len < FRESH {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf is a plain query.
        let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
            size if size > 0 => size as usize,
            _ => return,
        };
        let first = (start as usize).div_ceil(page) * page;
        let end = (start as usize + len) / page * page;
        if end <= first {
            return;
        }
        // SAFETY: the range is whole pages inside an allocation the
        // caller owns; MADV_POPULATE_WRITE faults them in without writing
        // (an anonymous page reads as zeros either way), so nothing the
        // buffer holds changes. An error only means the pages fault in
        // later, one by one.
        unsafe {
            libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            libc::madvise(
                first as *mut libc::c_void,
                end - first,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_populated_buffer_keeps_what_it_holds_and_fills_as_any() {
        let mut buffer: Vec<u8> = Vec::with_capacity(FRESH + 12_345);
        buffer.extend_from_slice(b"kept");
        let spare = buffer.spare_capacity_mut();
        populate(spare.as_ptr().cast(), spare.len());
        assert_eq!(&buffer[..], b"kept");
        buffer.resize(FRESH + 12_345, 7);
        assert!(buffer[4..].iter().all(|&b| b == 7));
        // Small buffers and empty ranges are left alone.
        populate(buffer.as_ptr(), 10);
        populate(std::ptr::null(), 0);
    }
}
