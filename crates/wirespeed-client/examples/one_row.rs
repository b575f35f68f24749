//! Times one-row infer calls, one at a time, on one kept-open connection:
//! the client's own cost with no Python around it.
//!
//!     cargo run --release -p wirespeed-client --example one_row -- 127.0.0.1:8000 [CALLS] [json]

use std::time::Instant;

use wirespeed_client::{Client, ClientOptions, InferInput, InferRequest, RequestedOutput};
use wirespeed_core::TensorData;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "127.0.0.1:8000".to_owned());
    let calls: usize = args.next().map_or(Ok(5000), |n| n.parse())?;
    let json = args.next().as_deref() == Some("json");
    let row = vec![
        1.0, 0.0, 1.0, 0.2875, 0.333, 0.0, 0.3226, 0.0, 1.0, 0.0, 0.0, 0.0,
    ];
    let input = if json {
        InferInput::json("features", vec![1, 12], TensorData::Fp32(row))
    } else {
        InferInput::binary("features", vec![1, 12], TensorData::Fp32(row))
    };
    let mut request = InferRequest::new(vec![input]);
    request.outputs.push(RequestedOutput {
        name: "probability".into(),
        binary: !json,
        ..Default::default()
    });
    let mut client = Client::new(&url, ClientOptions::default())?;
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let start = Instant::now();
        client.infer("titanic", "", &request)?;
        times.push(start.elapsed().as_nanos() as u64);
    }
    times.sort_unstable();
    println!(
        "p50 {:.3} ms, p99 {:.3} ms over {calls} calls",
        times[calls / 2] as f64 / 1e6,
        times[calls * 99 / 100] as f64 / 1e6
    );
    Ok(())
}
