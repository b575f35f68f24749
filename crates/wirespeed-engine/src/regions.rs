//! Triton's system shared-memory extension: a client on the same host puts
//! a tensor in a POSIX shared-memory object, registers a region of it by
//! name, and sends only the region's name, offset and size; outputs can be
//! written to regions the same way. The tensor never crosses the socket.
//!
//! A region is mapped once, when it is registered (the object is opened
//! under `/dev/shm`, where Linux keeps what `shm_open` creates), and
//! unmapped when it is unregistered and no request still reads it. Every
//! access is checked against the region's bounds; an unregistered region,
//! an offset past its end or a region too small is a client error that
//! names it. CUDA shared memory is refused: wirespeed has no GPU.
//!
//! The mapping is shared with another process that may write it at any
//! time, so it is never borrowed as a Rust slice: bytes are copied in and
//! out through raw pointers, numbers straight between the region and the
//! tensor's memory, BYTES through a small buffer. This module holds the
//! crate's only `unsafe` code.

#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use memmap2::{MmapOptions, MmapRaw};
use wirespeed_core::raw::{raw_bytes, raw_len, write_raw, RawError, RawFiller};
use wirespeed_core::{
    element_count, Error, ErrorKind, InferRequest, RequestedOutput, SharedOutput, SharedRef, Tensor,
};

/// Where Linux keeps POSIX shared-memory objects.
const SHM_DIR: &str = "/dev/shm";

/// Regions registered at once, at most: each holds a mapping.
const MAX_REGIONS: usize = 4096;

/// Bytes copied out of a region at a time, into a buffer that stays in
/// cache, on their way into a tensor.
const COPY_CHUNK: usize = 64 * 1024;

/// One registered region.
pub struct Region {
    /// The name it was registered under.
    pub name: String,
    /// The shared-memory key it maps (`/name` under `/dev/shm`).
    pub key: String,
    /// Where in the key's object the region starts.
    pub offset: usize,
    /// How many bytes the region spans.
    pub byte_size: usize,
    map: MmapRaw,
}

impl Region {
    /// Checks that `len` bytes at `offset` lie inside the region.
    fn check(&self, offset: usize, len: usize, what: &str) -> Result<(), Error> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.byte_size)
        {
            return Err(Error::invalid_input(format!(
                "{what}: {len} bytes at offset {offset} do not fit shared memory region '{}' of \
                 {} bytes",
                self.name, self.byte_size
            )));
        }
        Ok(())
    }

    /// Feeds `len` bytes at `offset` to `filler`: straight into the
    /// tensor's memory for numbers, through a small buffer for BYTES.
    fn read_into(&self, offset: usize, len: usize, filler: &mut RawFiller) -> Result<(), RawError> {
        let source = self.map.as_ptr();
        let whole = filler.fill_whole(|tensor| {
            debug_assert_eq!(tensor.len(), len);
            // SAFETY: `check` put offset + len inside the mapping, which
            // lives as long as `self`; the filler checked that the tensor
            // takes exactly `len` bytes. The source may change under us
            // (another process owns it): bytes are copied, never borrowed.
            unsafe {
                std::ptr::copy_nonoverlapping(source.add(offset), tensor.as_mut_ptr(), len);
            }
        });
        if whole {
            return Ok(());
        }
        let mut chunk = vec![0u8; COPY_CHUNK.min(len)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(COPY_CHUNK);
            // SAFETY: `check` put offset + len inside the mapping, which
            // lives as long as `self`; the destination is our own buffer.
            // The source may change under us (another process owns it):
            // bytes are copied, never borrowed.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.map.as_ptr().add(offset + done),
                    chunk.as_mut_ptr(),
                    n,
                );
            }
            filler.push(&chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Writes `bytes` at `offset`.
    fn write(&self, offset: usize, bytes: &[u8]) {
        // SAFETY: the caller checked offset + bytes.len() against the
        // region, inside the mapping (mapped writable), which lives as long
        // as `self`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.map.as_mut_ptr().add(offset),
                bytes.len(),
            );
        }
    }
}

/// The registered regions, by name.
#[derive(Default)]
pub struct SharedMemory {
    regions: RwLock<BTreeMap<String, Arc<Region>>>,
}

fn not_found(name: &str) -> Error {
    Error::invalid_input(format!(
        "no system shared memory region '{name}' is registered"
    ))
}

impl SharedMemory {
    /// Maps `byte_size` bytes at `offset` of the shared-memory object
    /// `key` as region `name`.
    pub fn register(
        &self,
        name: &str,
        key: &str,
        offset: usize,
        byte_size: usize,
    ) -> Result<(), Error> {
        if name.is_empty() {
            return Err(Error::invalid_input("a shared memory region needs a name"));
        }
        let object = key.strip_prefix('/').unwrap_or(key);
        if object.is_empty() || object.contains('/') || object == "." || object == ".." {
            return Err(Error::invalid_input(format!(
                "'{key}' is not a POSIX shared memory key: it is a name like '/input0', as given \
                 to shm_open"
            )));
        }
        if byte_size == 0 {
            return Err(Error::invalid_input(format!(
                "shared memory region '{name}' has byte_size 0"
            )));
        }
        let path = PathBuf::from(SHM_DIR).join(object);
        // Never through a symbolic link: anyone may create one in /dev/shm,
        // and a region is written to. Only a regular file is mapped.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                Error::invalid_input(format!(
                    "cannot open shared memory key '{key}' for region '{name}': {e}"
                ))
            })?;
        let metadata = file.metadata().map_err(|e| {
            Error::invalid_input(format!("cannot read shared memory key '{key}': {e}"))
        })?;
        if !metadata.is_file() {
            return Err(Error::invalid_input(format!(
                "shared memory key '{key}' is not a shared memory object"
            )));
        }
        let len = metadata.len();
        let end = offset.checked_add(byte_size).map(|e| e as u64);
        if end.is_none_or(|end| end > len) {
            return Err(Error::invalid_input(format!(
                "shared memory region '{name}' ({byte_size} bytes at offset {offset}) goes past \
                 the end of '{key}', which has {len} bytes"
            )));
        }
        let map = MmapOptions::new()
            .offset(offset as u64)
            .len(byte_size)
            .map_raw(&file)
            .map_err(|e| {
                Error::invalid_input(format!(
                    "cannot map shared memory region '{name}' of '{key}': {e}"
                ))
            })?;
        let mut regions = self.regions.write().unwrap_or_else(PoisonError::into_inner);
        if regions.contains_key(name) {
            return Err(Error::invalid_input(format!(
                "shared memory region '{name}' is already registered; unregister it first"
            )));
        }
        if regions.len() >= MAX_REGIONS {
            return Err(Error::new(
                ErrorKind::LimitExceeded,
                format!(
                    "{MAX_REGIONS} shared memory regions are registered, the most there may be"
                ),
            ));
        }
        regions.insert(
            name.to_owned(),
            Arc::new(Region {
                name: name.to_owned(),
                key: key.to_owned(),
                offset,
                byte_size,
                map,
            }),
        );
        Ok(())
    }

    /// Unregisters region `name`, or every region when `name` is empty.
    /// Requests reading a region keep it mapped until they end. A region
    /// that is not registered is no error, as with Triton.
    pub fn unregister(&self, name: &str) {
        let mut regions = self.regions.write().unwrap_or_else(PoisonError::into_inner);
        if name.is_empty() {
            regions.clear();
        } else {
            regions.remove(name);
        }
    }

    /// Region `name`, or every region when `name` is empty.
    pub fn status(&self, name: &str) -> Result<Vec<Arc<Region>>, Error> {
        let regions = self.regions.read().unwrap_or_else(PoisonError::into_inner);
        if name.is_empty() {
            return Ok(regions.values().cloned().collect());
        }
        regions
            .get(name)
            .cloned()
            .map(|r| vec![r])
            .ok_or_else(|| not_found(name))
    }

    fn get(&self, name: &str) -> Result<Arc<Region>, Error> {
        let regions = self.regions.read().unwrap_or_else(PoisonError::into_inner);
        regions.get(name).cloned().ok_or_else(|| not_found(name))
    }

    /// The request's inputs that lie in shared memory, each with its
    /// region, checked: registered, and the bytes inside it. The regions
    /// are held, so unregistering one does not pull it from under a
    /// request that reads it.
    pub fn resolve_inputs(&self, request: &mut InferRequest) -> Result<InputCopies, Error> {
        let mut copies = Vec::with_capacity(request.shared_inputs.len());
        for shared in std::mem::take(&mut request.shared_inputs) {
            let what = format!("input '{}'", request.inputs[shared.input].name);
            let region = self
                .get(&shared.at.region)
                .map_err(|e| in_tensor(e, &what))?;
            region.check(shared.at.offset, shared.at.byte_size, &what)?;
            copies.push((shared.input, region, shared.at));
        }
        Ok(InputCopies(copies))
    }

    /// The requested outputs to write to shared memory, checked before the
    /// model runs: parameters well formed, regions registered, offsets
    /// inside them.
    pub fn placements(&self, requested: &[RequestedOutput]) -> Result<Placements, Error> {
        let mut all = Vec::new();
        for output in requested {
            let Some(at) = SharedRef::from_parameters(&output.parameters)
                .map_err(|m| Error::invalid_input(format!("output '{}': {m}", output.name)))?
            else {
                continue;
            };
            let what = format!("output '{}'", output.name);
            let region = self.get(&at.region).map_err(|e| in_tensor(e, &what))?;
            region.check(at.offset, at.byte_size, &what)?;
            all.push((output.name.clone(), region, at));
        }
        Ok(Placements(all))
    }
}

/// A request's inputs to read from shared memory, resolved.
pub struct InputCopies(Vec<(usize, Arc<Region>, SharedRef)>);

impl InputCopies {
    /// Whether no input lies in shared memory.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes to copy.
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|(_, _, at)| at.byte_size).sum()
    }

    /// Reads each input from its region into its tensor. BYTES elements
    /// may be at most `max_element` bytes.
    pub fn copy(self, request: &mut InferRequest, max_element: usize) -> Result<(), Error> {
        for (input, region, at) in self.0 {
            let tensor = &mut request.inputs[input];
            let count = element_count(&tensor.shape).expect("the decoder counted the shape");
            let name = tensor.name.clone();
            let invalid = |e: RawError| e.for_input(&name);
            let mut filler = RawFiller::new(tensor.datatype(), count, at.byte_size, max_element)
                .map_err(invalid)?;
            region
                .read_into(at.offset, at.byte_size, &mut filler)
                .map_err(invalid)?;
            tensor.data = filler.finish().map_err(invalid)?;
        }
        Ok(())
    }
}

/// A request's outputs to write to shared memory, resolved.
pub struct Placements(Vec<(String, Arc<Region>, SharedRef)>);

impl Placements {
    /// Whether no output goes to shared memory.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The most bytes the outputs may take.
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|(_, _, at)| at.byte_size).sum()
    }

    /// Writes each placed output to its region, and says where it went.
    pub fn write(self, outputs: &[Tensor]) -> Result<Vec<SharedOutput>, Error> {
        let mut written = Vec::with_capacity(self.0.len());
        for (name, region, at) in self.0 {
            let Some(index) = outputs.iter().position(|t| t.name == name) else {
                continue;
            };
            let tensor = &outputs[index];
            let len = raw_len(&tensor.data);
            if len > at.byte_size {
                return Err(Error::invalid_input(format!(
                    "output '{name}' takes {len} bytes, more than the {} bytes of \
                     shared_memory_byte_size it was given in region '{}'",
                    at.byte_size, at.region
                )));
            }
            // Numbers go from the tensor's memory straight to the region;
            // BOOL and BYTES are laid out first.
            match raw_bytes(&tensor.data) {
                Some(bytes) => region.write(at.offset, bytes),
                None => {
                    let mut bytes = Vec::with_capacity(len);
                    write_raw(&tensor.data, &mut bytes);
                    region.write(at.offset, &bytes);
                }
            }
            written.push(SharedOutput {
                output: index,
                at,
                written: len,
            });
        }
        Ok(written)
    }
}

/// Shared-memory copies larger than this run on the CPU pool: a copy of a
/// few megabytes would hold the connection's I/O thread for a millisecond.
pub const OFFLOAD_COPY_BYTES: usize = 1 << 20;

/// `error` about a region, said of one tensor.
fn in_tensor(error: Error, what: &str) -> Error {
    Error::new(error.kind(), format!("{what}: {}", error.message()))
}

/// The answer for registering CUDA shared memory.
pub fn cuda_refused() -> Error {
    Error::new(
        ErrorKind::Unsupported,
        "CUDA shared memory is not supported: wirespeed runs on CPUs and has no GPU; register \
         system shared memory instead",
    )
}
