//! Lent buffers under the server's own global allocator, as the
//! `wirespeed` binary installs it: a region lends tensors over its memory,
//! and each comes back to it when dropped or moved out when resized.

#![allow(unsafe_code)]

use std::sync::{Arc, Mutex};

use wirespeed_core::lent::{Lender, Region, MIN_BYTES};
use wirespeed_core::shared_heap::{self, Allocator};
use wirespeed_core::{DataType, TensorData};

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// Remembers what came back.
#[derive(Default)]
struct Back(Mutex<Vec<usize>>);

impl Lender for Back {
    fn give_back(&self, offset: usize) {
        self.0.lock().unwrap().push(offset);
    }
}

impl Back {
    fn taken(&self) -> Vec<usize> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// `len` bytes of shared memory, mapped for good (a test's leak), as a
/// worker's output segment is.
fn mapping(len: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping.
    let at = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(at, libc::MAP_FAILED);
    at.cast()
}

#[test]
fn a_region_lends_tensors_that_come_back_when_dropped_or_resized() {
    shared_heap::start().unwrap();
    assert!(shared_heap::installed());
    let len = 4 * MIN_BYTES;
    let base = mapping(len);
    // What a worker wrote: 0.0, 1.0, 2.0... from the start.
    let floats = MIN_BYTES / 4;
    for i in 0..floats {
        // SAFETY: inside the mapping, aligned.
        unsafe { base.cast::<f32>().add(i).write(i as f32) };
    }
    let back = Arc::new(Back::default());
    // SAFETY: the mapping stays for good and nothing allocates there.
    let region = unsafe { Region::new(base, len, Arc::clone(&back) as Arc<dyn Lender>) }.unwrap();

    // SAFETY (each `tensor` below): nothing else writes the region.
    let lent = unsafe { region.tensor(DataType::Fp32, 0, MIN_BYTES) }.unwrap();
    let TensorData::Fp32(values) = &lent else {
        panic!("{:?}", lent.datatype())
    };
    assert_eq!(values.as_ptr().cast::<u8>(), base.cast_const());
    assert_eq!(
        (values.len(), values[0], values[floats - 1]),
        (floats, 0.0, (floats - 1) as f32)
    );
    assert_eq!(region.loans(), 1);
    drop(lent);
    assert_eq!((back.taken(), region.loans()), (vec![0], 0));

    // Not lent: too small, a type whose bytes may not all be values, a
    // length that is no whole number of elements, a place outside, a
    // misaligned one.
    unsafe {
        assert!(region.tensor(DataType::Fp32, 0, MIN_BYTES - 4).is_none());
        assert!(region.tensor(DataType::Bool, 0, MIN_BYTES).is_none());
        assert!(region.tensor(DataType::Bytes, 0, MIN_BYTES).is_none());
        assert!(region.tensor(DataType::Fp64, 0, MIN_BYTES + 4).is_none());
        assert!(region
            .tensor(DataType::Uint8, len - MIN_BYTES + 1, MIN_BYTES)
            .is_none());
        assert!(region.tensor(DataType::Int32, 2, MIN_BYTES).is_none());
    }
    assert_eq!(region.loans(), 0);

    // Grown, it moves out with its elements, and its place comes back.
    let offset = MIN_BYTES;
    let mut lent = unsafe { region.tensor(DataType::Uint8, offset, MIN_BYTES) }.unwrap();
    let TensorData::Uint8(bytes) = &mut lent else {
        unreachable!()
    };
    bytes[0] = 42;
    bytes.push(7);
    let moved = bytes.as_ptr() as usize;
    assert!(!(base as usize..base as usize + len).contains(&moved));
    assert_eq!(
        (bytes[0], bytes.len(), bytes[MIN_BYTES]),
        (42, MIN_BYTES + 1, 7)
    );
    assert_eq!((back.taken(), region.loans()), (vec![offset], 0));
    drop(lent);
    assert!(
        back.taken().is_empty(),
        "a moved buffer is the allocator's own"
    );

    // Shrunk too, and cloned: the clone is the allocator's own.
    let mut lent = unsafe { region.tensor(DataType::Int64, 2 * MIN_BYTES, MIN_BYTES) }.unwrap();
    let copy = lent.clone();
    drop(copy);
    assert!(back.taken().is_empty());
    if let TensorData::Int64(v) = &mut lent {
        v.truncate(3);
        v.shrink_to_fit();
        assert_eq!(v.capacity(), 3);
    }
    assert_eq!(back.taken(), vec![2 * MIN_BYTES]);
    drop(lent);

    // A region dropped with a tensor still out stays until it is back;
    // then its lender goes.
    let held = unsafe { region.tensor(DataType::Fp32, 3 * MIN_BYTES, MIN_BYTES) }.unwrap();
    drop(region);
    assert_eq!(Arc::strong_count(&back), 2, "the registry keeps the lender");
    drop(held);
    assert_eq!(back.taken(), vec![3 * MIN_BYTES]);
    assert_eq!(Arc::strong_count(&back), 1, "the region is gone");
}

#[test]
fn buffers_of_the_allocator_are_not_taken_for_lent_ones() {
    shared_heap::start().unwrap();
    let len = 2 * MIN_BYTES;
    let base = mapping(len);
    let back = Arc::new(Back::default());
    let region = unsafe { Region::new(base, len, Arc::clone(&back) as Arc<dyn Lender>) }.unwrap();
    for size in [MIN_BYTES, 4 * MIN_BYTES, 32 << 20] {
        let mut own = vec![1u8; size];
        own.push(2);
        drop(own);
        drop(shared_heap::shareable(|| vec![3u8; size]));
    }
    assert!(back.taken().is_empty());
    drop(region);
    assert_eq!(Arc::strong_count(&back), 1);
}
