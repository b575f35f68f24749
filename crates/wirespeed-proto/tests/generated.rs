//! The Rust in `src/generated/` is what tonic-prost-build makes of the
//! `.proto` files today. It is generated here, not at build time (see
//! `build.rs` for why), and this test fails when the two differ.
//!
//! The generator reads the descriptor sets that `build.rs` compiles (the
//! crate's `FILE_DESCRIPTOR_SET` and `TF_FILE_DESCRIPTOR_SET`), so the
//! protos are parsed in one place.
//!
//! After changing a `.proto` file or the generator's version:
//! `WIRESPEED_REGENERATE_PROTOS=1 cargo test -p wirespeed-proto --test generated`.

use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::FileDescriptorSet;

/// The generated files, as tonic-prost-build names them by package.
const FILES: [&str; 3] = ["inference.rs", "tensorflow.rs", "tensorflow.serving.rs"];

fn generate(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let inference = FileDescriptorSet::decode(wirespeed_proto::FILE_DESCRIPTOR_SET)?;
    tonic_prost_build::configure()
        .out_dir(out)
        .build_server(true)
        .build_client(true)
        // Raw tensor contents are sliced out of a received message, never
        // copied.
        .bytes(".")
        // One message is written by hand (`src/stream_frame.rs`): a stream
        // answer that may go out as MLServer's stream sends its answers.
        .extern_path(
            ".inference.ModelStreamInferResponse",
            "crate::stream_frame::ModelStreamInferResponse",
        )
        .compile_fds(inference)?;
    let tf = FileDescriptorSet::decode(wirespeed_proto::TF_FILE_DESCRIPTOR_SET)?;
    tonic_prost_build::configure()
        .out_dir(out)
        .build_server(true)
        .build_client(true)
        .bytes(".tensorflow.TensorProto.tensor_content")
        .compile_fds(tf)?;
    Ok(())
}

#[test]
fn the_generated_code_is_what_the_protos_make() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wirespeed-proto-generated");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    generate(&out).unwrap();
    let regenerate = std::env::var_os("WIRESPEED_REGENERATE_PROTOS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for file in FILES {
        let fresh = std::fs::read_to_string(out.join(file)).unwrap();
        let committed = crate_dir.join("src/generated").join(file);
        if std::fs::read_to_string(&committed).ok().as_deref() != Some(fresh.as_str()) {
            if regenerate {
                std::fs::write(&committed, &fresh).unwrap();
            } else {
                stale.push(file);
            }
        }
    }
    let mut made: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    made.sort();
    assert_eq!(
        made, FILES,
        "the generator made other files than src/generated/ holds"
    );
    assert!(
        stale.is_empty(),
        "src/generated/{stale:?} differ from what the protos make: run \
         WIRESPEED_REGENERATE_PROTOS=1 cargo test -p wirespeed-proto --test generated"
    );
}
