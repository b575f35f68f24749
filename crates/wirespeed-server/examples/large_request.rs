//! The time from a large request's last byte to its answer.
//!
//! Sends `ROWS x COLS` FP32 values (json.dumps style, ~19 characters each)
//! to the `echo` identity model in `benchmarks/models/`, optionally paced to
//! `RATE` MB/s, and asks only for the small output, so what is timed after
//! the last byte is the decode that had not finished yet, plus validation
//! and a tiny answer. In the same run it times the buffered alternative: the
//! whole body decoded after it has arrived, as a server that buffers must.
//!
//! ```text
//! wirespeed serve --models benchmarks/models &
//! cargo run --release -p wirespeed-server --example large_request -- 127.0.0.1:8000 ROWS COLS RATE REPEATS [long|short]
//! ```
//!
//! `long` values are float32 widened to float64 as `json.dumps` prints them
//! (~20.5 bytes each with the separator), `short` are rounded to 4 decimals
//! (~8.4 bytes).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use wirespeed_json::{decode_infer_request, DecodeOptions};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_owned());
    let addr = arg(1, "127.0.0.1:8000");
    let rows: usize = arg(2, "8").parse().expect("ROWS");
    let cols: usize = arg(3, "262144").parse().expect("COLS");
    let rate_mb_s: f64 = arg(4, "0").parse().expect("RATE (0 = as fast as possible)");
    let repeats: usize = arg(5, "10").parse().expect("REPEATS");
    let short = arg(6, "long") == "short";

    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let values: Vec<String> = (0..rows * cols)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = f64::from(((state >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0);
            if short {
                format!("{:?}", (x * 1e4).round() / 1e4)
            } else {
                format!("{x:?}")
            }
        })
        .collect();
    let body = format!(
        r#"{{"inputs": [{{"name": "x", "shape": [{rows}, {cols}], "datatype": "FP32", "data": [{}]}}, {{"name": "y", "shape": [1], "datatype": "FP32", "data": [1.5]}}], "outputs": [{{"name": "y_out"}}]}}"#,
        values.join(", ")
    );
    let head = format!(
        "POST /v2/models/echo/infer HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    println!(
        "body {:.1} MB ({rows} x {cols} FP32, {} tensor bytes), {}",
        body.len() as f64 / 1e6,
        rows * cols * 4,
        if rate_mb_s > 0.0 {
            format!("paced to {rate_mb_s} MB/s")
        } else {
            "unpaced".to_owned()
        }
    );

    let mut after_last_byte = Vec::new();
    let mut whole = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    for _ in 0..repeats {
        let mut stream = TcpStream::connect(&addr)?;
        stream.set_nodelay(true)?;
        let started = Instant::now();
        stream.write_all(head.as_bytes())?;
        let piece = 64 * 1024;
        for (i, chunk) in body.as_bytes().chunks(piece).enumerate() {
            if rate_mb_s > 0.0 {
                let due = Duration::from_secs_f64((i * piece) as f64 / (rate_mb_s * 1e6));
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            stream.write_all(chunk)?;
        }
        let last_byte = Instant::now();
        let mut response = Vec::new();
        while !response.windows(4).any(|w| w == b"\r\n\r\n") || !complete(&response) {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                break;
            }
            response.extend_from_slice(&buf[..n]);
        }
        after_last_byte.push(last_byte.elapsed());
        whole.push(started.elapsed());
        assert!(
            response.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&response[..response.len().min(300)])
        );
    }

    let mut buffered = [Vec::new(), Vec::new()];
    // One thread, and this thread with one helper.
    let helper = wirespeed_core::CpuPool::new(1)?;
    for _ in 0..repeats.min(5) {
        for (pool, times) in [None, Some(&helper)].into_iter().zip(buffered.iter_mut()) {
            let options = DecodeOptions {
                pool: pool.cloned(),
                ..DecodeOptions::default()
            };
            let t = Instant::now();
            std::hint::black_box(decode_infer_request(body.as_bytes(), &options).expect("decodes"));
            times.push(t.elapsed());
        }
    }

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!(
        "request, first byte to answer:   p50 {:.2} ms",
        ms(median(&mut whole))
    );
    println!(
        "streaming, last byte to answer:  p50 {:.3} ms (max {:.3} ms)",
        ms(median(&mut after_last_byte)),
        ms(*after_last_byte.iter().max().unwrap())
    );
    println!(
        "buffered, decode after last byte: {:.2} ms on 1 thread, {:.2} ms on 2",
        ms(median(&mut buffered[0])),
        ms(median(&mut buffered[1]))
    );
    Ok(())
}

/// Whether `response` holds the whole body its Content-Length announces.
fn complete(response: &[u8]) -> bool {
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    response.len() >= end + 4 + length
}
