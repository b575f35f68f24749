//! Writes the descriptor sets of the `.proto` files under `proto/` to
//! `OUT_DIR`, for gRPC reflection and the model configuration's reader.
//!
//! protox parses the protos in Rust, so building needs no `protoc` on the
//! machine. The Rust messages and stubs are not generated here: they are
//! in `src/generated/`, checked against the protos by `tests/generated.rs`.
//! Code included from `OUT_DIR` carries that folder's absolute path in its
//! panic locations, and with it the hash behind the `.llvm.N` names of its
//! inlined copies: the binary's start-up ordering (`startup.order`) would
//! then name different functions wherever the repository is cloned.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let inference = protox::compile(["proto/grpc_service.proto"], ["proto"])?;
    std::fs::write(out.join("descriptors.bin"), inference.encode_to_vec())?;
    // TF Serving's protos: a set of their own, so that reflection lists
    // their services only once the server answers them.
    let tf = protox::compile(
        ["proto/tensorflow_serving/apis/prediction_service.proto"],
        ["proto"],
    )?;
    std::fs::write(out.join("tf_descriptors.bin"), tf.encode_to_vec())?;
    Ok(())
}
