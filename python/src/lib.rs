//! The Python extension of wirespeed (`wirespeed._wirespeed`): thin
//! bindings over the workspace's crates, one file a concept, as polars
//! splits its bindings by class.
//!
//! - `codec.rs`: `decode_request`, `encode_response`, `DecodeError`
//!   (wirespeed-json);
//! - `trees.rs`: `wirespeed.trees` (wirespeed-trees, and wirespeed-models
//!   for a model folder's preprocessing);
//! - `client.rs`: the engine of `wirespeed.client.http` (wirespeed-client);
//! - `grpc.rs`: the engine of `wirespeed.client.grpc`;
//! - `connections.rs`: the kept-open connections both clients share;
//! - `pool.rs`: the CPU threads for large decodes and tree batches;
//! - `tensors.rs`: tensors to and from numpy.
//!
//! The typed, documented Python API is the `wirespeed` package beside this
//! crate; it re-exports these.

mod client;
mod codec;
mod connections;
mod grpc;
mod pool;
mod tensors;
mod trees;

use pyo3::prelude::*;

#[pymodule]
fn _wirespeed(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DecodeError", py.get_type::<codec::DecodeError>())?;
    m.add_class::<codec::Request>()?;
    m.add_function(wrap_pyfunction!(codec::decode_request, m)?)?;
    m.add_function(wrap_pyfunction!(codec::encode_response, m)?)?;
    m.add_class::<trees::Model>()?;
    m.add_function(wrap_pyfunction!(trees::load, m)?)?;
    m.add_class::<client::HttpClient>()?;
    m.add_class::<client::InferInput>()?;
    m.add_class::<client::InferRequestedOutput>()?;
    m.add_class::<client::InferResult>()?;
    m.add_class::<grpc::GrpcConnections>()?;
    Ok(())
}
