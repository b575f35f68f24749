//! Compiles every `.proto` under `proto/` into prost messages and tonic
//! clients and servers.
//!
//! protox parses the protos in Rust, so building needs no `protoc` on the
//! machine. The descriptor set is also written to `OUT_DIR` for gRPC
//! reflection. Bytes fields become `bytes::Bytes`, so raw tensor contents
//! are sliced out of a received message rather than copied.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/grpc_service.proto"];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("descriptors.bin"), descriptors.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        // One message is written by hand (`src/stream_frame.rs`): a stream
        // answer that may go out as MLServer's stream sends its answers.
        .extern_path(
            ".inference.ModelStreamInferResponse",
            "crate::stream_frame::ModelStreamInferResponse",
        )
        .compile_fds(descriptors)?;
    // TF Serving's protos: a set of their own, so that reflection lists
    // their services only once the server answers them.
    let tf = protox::compile(
        ["proto/tensorflow_serving/apis/prediction_service.proto"],
        ["proto"],
    )?;
    std::fs::write(out.join("tf_descriptors.bin"), tf.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".tensorflow.TensorProto.tensor_content")
        .compile_fds(tf)?;
    Ok(())
}
