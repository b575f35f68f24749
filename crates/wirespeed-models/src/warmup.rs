//! Triton's `model_warmup`: requests a model runs once it is loaded and
//! before it reports ready, so that its first client does not pay for
//! what a first run costs (allocations, caches, a worker's imports). A
//! warmup that fails is a load error, as in Triton.
//!
//! Each sample (`[[warmup]]` in `config.toml`, `model_warmup` in a
//! `config.pbtxt`) names its inputs, each with a datatype, dims and its
//! data: zeros, random values (uniform in [0, 1) for floats, 0 to 99 for
//! integers, random booleans; BYTES elements empty), or a file in the
//! model's `warmup/` folder holding the tensor's raw bytes (BYTES elements
//! each after its 4-byte length, as the binary extension lays them out).
//! With a batch dimension of Triton's the tensors get `batch_size` rows
//! first (at most `max_batch_size`). The sample runs `count` times (at
//! most `MAX_COUNT`). A configuration may come with a load request, so
//! every tensor is held to the default request limits before anything is
//! allocated or read, as a request's would be.

use std::path::Path;
use std::sync::Arc;

use wirespeed_backend::warmup::{WarmupConfig, MAX_COUNT};
use wirespeed_core::raw::from_raw;
use wirespeed_core::{DataType, InferCall, Model, RequestLimits, Tensor, TensorBudget};

/// Runs every sample on `model`, whose folder is `folder`;
/// `max_batch_size` is Triton's (0: no batch dimension).
pub(crate) fn run(
    model: &Arc<dyn Model>,
    samples: &[WarmupConfig],
    folder: &Path,
    max_batch_size: usize,
) -> Result<(), String> {
    if samples.is_empty() {
        return Ok(());
    }
    // A model that awaits (a Python worker) is driven by a runtime of the
    // warmup's own, on a thread of its own: the loading thread may be one
    // of the server's runtime's, which cannot block on another.
    let model = Arc::clone(model);
    let samples = samples.to_vec();
    let folder = folder.to_owned();
    std::thread::Builder::new()
        .name("wirespeed-warmup".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the warmup's runtime: {e}"))?;
            run_samples(&runtime, &model, &samples, &folder, max_batch_size)
        })
        .map_err(|e| format!("cannot start the warmup's thread: {e}"))?
        .join()
        .unwrap_or_else(|_| Err("the warmup panicked".to_owned()))
}

fn run_samples(
    runtime: &tokio::runtime::Runtime,
    model: &Arc<dyn Model>,
    samples: &[WarmupConfig],
    folder: &Path,
    max_batch_size: usize,
) -> Result<(), String> {
    let batch = max_batch_size > 0;
    let limits = RequestLimits::default();
    let outputs: Vec<usize> = (0..model.metadata().outputs.len()).collect();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for sample in samples {
        let failed = |why: String| format!("warmup '{}' failed: {why}", sample.name);
        let rows = sample.batch_size.unwrap_or(1).max(1);
        if !batch && rows > 1 {
            return Err(failed(format!(
                "batch_size {rows}, and the model takes no batch dimension (max_batch_size 0)"
            )));
        }
        if batch && rows > max_batch_size {
            return Err(failed(format!(
                "batch_size {rows} is over the model's max_batch_size {max_batch_size}"
            )));
        }
        let count = sample.count.unwrap_or(1).max(1);
        if count > MAX_COUNT {
            return Err(failed(format!(
                "count {count}; a sample runs at most {MAX_COUNT} times"
            )));
        }
        let mut budget = TensorBudget::default();
        let mut inputs = Vec::with_capacity(sample.inputs.len());
        for (name, input) in &sample.inputs {
            let datatype: DataType = input
                .datatype
                .parse()
                .map_err(|e| failed(format!("input '{name}': {e}")))?;
            let mut shape: Vec<usize> = if batch { vec![rows] } else { Vec::new() };
            for &d in &input.dims {
                shape.push(usize::try_from(d).map_err(|_| {
                    failed(format!(
                        "input '{name}' has dimension {d}; a warmup's are concrete"
                    ))
                })?);
            }
            // Held to the limits before anything is allocated or read.
            let elements = budget
                .take_shape(&limits, datatype, &shape)
                .map_err(|e| failed(e.in_input(name).to_string()))?;
            let bytes = match (&input.input_data_file, input.random_data) {
                (Some(file), _) => {
                    let path = wirespeed_backend::config::inside(
                        &folder.join("warmup"),
                        "input_data_file",
                        file,
                    )
                    .map_err(failed)?;
                    let cannot =
                        |e: std::io::Error| failed(format!("cannot read {}: {e}", path.display()));
                    let size = std::fs::metadata(&path).map_err(cannot)?.len();
                    if size > limits.max_tensor_bytes as u64 {
                        return Err(failed(format!(
                            "{} has {size} bytes, over the limit of {} for a tensor",
                            path.display(),
                            limits.max_tensor_bytes
                        )));
                    }
                    std::fs::read(&path).map_err(cannot)?
                }
                (None, true) => random_raw(datatype, elements, &mut seed),
                (None, false) => zero_raw(datatype, elements),
            };
            let data = from_raw(datatype, elements, &bytes, limits.max_string_bytes)
                .map_err(|e| failed(e.for_input(name).to_string()))?;
            inputs.push(Tensor {
                name: name.clone(),
                shape,
                data,
                parameters: Vec::new(),
            });
        }
        // In the model's order, as a request's are given to it.
        let declared = &model.metadata().inputs;
        inputs.sort_by_key(|t| declared.iter().position(|s| s.name == t.name));
        model
            .metadata()
            .check_inputs(&inputs)
            .map_err(|e| failed(e.to_string()))?;
        for _ in 0..count {
            let call = InferCall {
                inputs: inputs.clone(),
                outputs: outputs.clone(),
                parameters: Vec::new(),
                deadline: None,
                trace: None,
                responses: None,
                input_parameters: Vec::new(),
            };
            runtime
                .block_on(Arc::clone(model).infer_async(call))
                .map_err(|e| failed(e.to_string()))?;
        }
        tracing::info!(model = %model.metadata().name, warmup = %sample.name, "warmed up");
    }
    Ok(())
}

/// Zeros, as raw bytes (empty BYTES elements).
fn zero_raw(datatype: DataType, count: usize) -> Vec<u8> {
    vec![0; datatype.element_size().unwrap_or(4) * count]
}

/// Random values, as raw bytes.
fn random_raw(datatype: DataType, count: usize, seed: &mut u64) -> Vec<u8> {
    let mut next = || {
        // xorshift64*: enough for sample data.
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let unit = |n: u64| (n >> 11) as f64 / (1u64 << 53) as f64;
    let mut out = Vec::with_capacity(datatype.element_size().unwrap_or(4) * count);
    for _ in 0..count {
        let n = next();
        match datatype {
            DataType::Fp32 => out.extend_from_slice(&(unit(n) as f32).to_le_bytes()),
            DataType::Fp64 => out.extend_from_slice(&unit(n).to_le_bytes()),
            DataType::Fp16 => out.extend_from_slice(
                &wirespeed_core::f16::from_f64(unit(n))
                    .to_bits()
                    .to_le_bytes(),
            ),
            DataType::Bf16 => out.extend_from_slice(
                &wirespeed_core::bf16::from_f64(unit(n))
                    .to_bits()
                    .to_le_bytes(),
            ),
            DataType::Bool => out.push((n & 1) as u8),
            DataType::Bytes => out.extend_from_slice(&0u32.to_le_bytes()),
            other => {
                let size = other.element_size().unwrap_or(1);
                let value = (n % 100).to_le_bytes();
                out.extend_from_slice(&value[..size]);
            }
        }
    }
    out
}
