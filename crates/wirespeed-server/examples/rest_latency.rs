//! A single-client closed-loop latency probe for the V2 REST infer endpoint:
//! one keep-alive connection, one request in flight, the next sent as soon as
//! the previous answer is read. Prints percentiles of the round-trip time.
//!
//! ```text
//! cargo run --release -p wirespeed-server --example rest_latency -- [ADDR] [REQUESTS] [ROWS]
//! ```
//!
//! Plain std sockets, so the client adds as little as possible to what is
//! measured. `wirespeed bench` is the real load generator.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).map_or("127.0.0.1:8000", String::as_str);
    let requests: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let rows: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);

    let row = "[1,0,1,0.2875,0.3333333333333333,0,0.322667,0,1,0,0,0]";
    let data = vec![row; rows].join(",");
    let body = format!(
        r#"{{"inputs":[{{"name":"features","shape":[{rows},12],"datatype":"FP32","data":[{data}]}}]}}"#
    );
    let request = format!(
        "POST /v2/models/titanic/infer HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );

    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; 1 << 20];
    let warmup = requests / 10;
    let mut samples = Vec::with_capacity(requests);
    let started = Instant::now();
    for i in 0..warmup + requests {
        let t0 = Instant::now();
        stream.write_all(request.as_bytes())?;
        read_response(&mut stream, &mut buf)?;
        if i >= warmup {
            samples.push(t0.elapsed());
        }
    }
    let wall = started.elapsed();

    samples.sort_unstable();
    let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!("{requests} requests ({rows} row(s) each) after {warmup} warm-up, one connection, closed loop");
    println!(
        "p50 {:.1} us  p90 {:.1} us  p99 {:.1} us  p99.9 {:.1} us  max {:.1} us  mean {:.1} us",
        us(pct(0.50)),
        us(pct(0.90)),
        us(pct(0.99)),
        us(pct(0.999)),
        us(*samples.last().unwrap()),
        us(mean)
    );
    println!(
        "{:.0} requests/s",
        (warmup + requests) as f64 / wall.as_secs_f64()
    );
    Ok(())
}

/// Reads one HTTP/1.1 response with a Content-Length and checks it is a 200.
fn read_response(stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut len = 0;
    loop {
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            return Err(std::io::Error::other("server closed the connection"));
        }
        len += n;
        let Some(end) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = std::str::from_utf8(&buf[..end]).map_err(std::io::Error::other)?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(std::io::Error::other(format!(
                "unexpected response: {head}"
            )));
        }
        let content_length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap_or(0))
            })
            .unwrap_or(0);
        while len < end + 4 + content_length {
            let n = stream.read(&mut buf[len..])?;
            if n == 0 {
                return Err(std::io::Error::other("server closed the connection"));
            }
            len += n;
        }
        return Ok(());
    }
}
