//! Times one ONNX model in-process, for `benchmarks/scripts/onnx_inprocess.py`:
//! loads the model folder the way the server does (`backend = "onnx"`),
//! runs it on the given FP32 rows `calls` times, asking for every output,
//! and prints the median seconds per call; writes the first call's first
//! FP32 output (little endian) for the script to check against
//! onnxruntime's.
//!
//! The model gets a CPU pool of THREADS threads (default 1), over which
//! the tree ensembles split large batches, as on the server.
//!
//!     onnx_infer FOLDER INPUT_FILE d0,d1,.. CALLS OUTPUT_FILE [THREADS]

use std::time::Instant;

use wirespeed_core::{CpuPool, Tensor, TensorData};
use wirespeed_models::{load_model, Registry};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (folder, input, shape, calls, output, threads) = match &args[..] {
        [_, f, i, s, c, o] => (f, i, s, c, o, "1"),
        [_, f, i, s, c, o, t] => (f, i, s, c, o, t.as_str()),
        _ => {
            return Err(
                "usage: onnx_infer FOLDER INPUT_FILE d0,d1,.. CALLS OUTPUT_FILE [THREADS]".into(),
            )
        }
    };
    let shape: Vec<usize> = shape.split(',').map(str::parse).collect::<Result<_, _>>()?;
    let calls: usize = calls.parse()?;
    let bytes = std::fs::read(input)?;
    let values: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let pool = CpuPool::new(threads.parse()?)?;
    let folder = std::path::Path::new(folder);
    let loaded = load_model("bench", folder, &Registry::builtin(), &pool, None)?.remove(0);
    let model = loaded.model;
    let name = model.metadata().inputs[0].name.clone();
    let tensor = Tensor {
        name,
        shape,
        data: TensorData::Fp32(values),
        parameters: Vec::new(),
    };
    let inputs = [tensor];
    let every: Vec<usize> = (0..model.metadata().outputs.len()).collect();
    let first = model.infer(&inputs, &every)?;
    if let Some(out) = first.iter().find_map(|t| match &t.data {
        TensorData::Fp32(out) => Some(out),
        _ => None,
    }) {
        let raw: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(output, raw)?;
    }
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let answer = model.infer(&inputs, &every)?;
        times.push(started.elapsed().as_secs_f64());
        std::hint::black_box(answer);
    }
    times.sort_by(f64::total_cmp);
    println!("{}", times[times.len() / 2]);
    Ok(())
}
