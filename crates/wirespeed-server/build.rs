//! Compiles `proto/grpc_service.proto` into the gRPC service and messages.
//!
//! protox parses the proto in Rust, so building needs no `protoc` on the
//! machine. The descriptor set is also written to `OUT_DIR` for gRPC
//! reflection. Bytes fields become `bytes::Bytes`, so raw tensor contents
//! are sliced out of the received message rather than copied.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = "../../proto";
    let proto = "../../proto/grpc_service.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], [dir])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("grpc_service_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        .compile_fds(descriptors)?;
    Ok(())
}
