//! Compiles google.rpc's `Status` and standard error details into a
//! descriptor set (`OUT_DIR/rpc_status.bin`), so that an upstream's
//! `grpc-status-details-bin` prints as JSON whatever the user's
//! descriptors hold. protox parses the protos in Rust: no `protoc` needed.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let set = protox::compile(
        ["google/rpc/status.proto", "google/rpc/error_details.proto"],
        ["proto"],
    )?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("rpc_status.bin"), set.encode_to_vec())?;
    Ok(())
}
