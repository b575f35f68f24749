//! What each transport costs: REST JSON, REST binary (Triton's extension)
//! and gRPC, each over TCP and a Unix socket, in one run against one
//! `wirespeed serve` process that this program starts.
//!
//! ```text
//! cargo build --release -p wirespeed
//! cargo run --release -p wirespeed-server --example transports -- [ROUNDS]
//! ```
//!
//! Models: the bundled `titanic` (12 features per row) and an identity model
//! fed FP32 rows of 784, 65536 and 262144 values (asked for its small `y`
//! output only, so the answer's encoding stays out of the figure), each at
//! batch 1 and 8. One client, one connection per transport, one request in
//! flight; the transports take turns in every round, so a slow moment of
//! the machine hits them alike. JSON bodies are written the way Python
//! clients write them (`json.dumps` of float32 values widened to float64).
//!
//! Reported per case: the p50 round trip, and the server's CPU time per
//! request (user + system, from `/proc/<pid>/stat`, over all requests of the
//! case).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wirespeed_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use wirespeed_proto::inference::model_infer_request::{
    InferInputTensor, InferRequestedOutputTensor,
};
use wirespeed_proto::inference::ModelInferRequest;

type Grpc = GrpcInferenceServiceClient<tonic::transport::Channel>;

/// The least time and requests of one transport's turn in a round.
const BLOCK: Duration = Duration::from_millis(300);
const MIN_REQUESTS: usize = 5;

struct Case {
    model: &'static str,
    rows: usize,
    cols: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Json,
    Binary,
    Grpc,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Json => "REST JSON",
            Transport::Binary => "REST binary",
            Transport::Grpc => "gRPC",
        }
    }
}

/// A JSON float the way `json.dumps` writes a float32 widened to float64.
fn json_float(x: f32, out: &mut String) {
    let mut buf = ryu::Buffer::new();
    out.push_str(buf.format(f64::from(x)));
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The HTTP request bytes of one case in one transport.
fn http_request(case: &Case, binary: bool) -> Vec<u8> {
    let x = values(case.rows * case.cols, case.cols as u64);
    let (input, outputs) = if case.model == "titanic" {
        ("features", String::new())
    } else {
        ("x", r#","outputs":[{"name":"y_out"}]"#.to_owned())
    };
    let extra = if case.model == "titanic" {
        String::new()
    } else if binary {
        r#",{"name":"y","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}"#
            .to_owned()
    } else {
        r#",{"name":"y","shape":[1],"datatype":"FP32","data":[1]}"#.to_owned()
    };
    let shape = format!("[{},{}]", case.rows, case.cols);
    let mut body;
    let mut header_len = None;
    if binary {
        let json = format!(
            r#"{{"inputs":[{{"name":"{input}","shape":{shape},"datatype":"FP32","parameters":{{"binary_data_size":{}}}}}{extra}]{outputs}}}"#,
            x.len() * 4
        );
        header_len = Some(json.len());
        body = json.into_bytes();
        for v in &x {
            body.extend_from_slice(&v.to_le_bytes());
        }
        if case.model != "titanic" {
            body.extend_from_slice(&1.0f32.to_le_bytes());
        }
    } else {
        let mut json =
            format!(r#"{{"inputs":[{{"name":"{input}","shape":{shape},"datatype":"FP32","data":["#);
        for (i, v) in x.iter().enumerate() {
            if i > 0 {
                json.push_str(", ");
            }
            json_float(*v, &mut json);
        }
        json.push_str(&format!("]}}{extra}]{outputs}}}"));
        body = json.into_bytes();
    }
    let mut head = format!(
        "POST /v2/models/{}/infer HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n",
        case.model,
        body.len()
    );
    if let Some(n) = header_len {
        head.push_str(&format!("Inference-Header-Content-Length: {n}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(&body);
    request
}

fn grpc_request(case: &Case) -> ModelInferRequest {
    let x = values(case.rows * case.cols, case.cols as u64);
    let mut raw = Vec::with_capacity(x.len() * 4);
    for v in &x {
        raw.extend_from_slice(&v.to_le_bytes());
    }
    let tensor = |name: &str, shape: Vec<i64>| InferInputTensor {
        name: name.into(),
        datatype: "FP32".into(),
        shape,
        ..Default::default()
    };
    let shape = vec![case.rows as i64, case.cols as i64];
    let mut request = ModelInferRequest {
        model_name: case.model.into(),
        ..Default::default()
    };
    if case.model == "titanic" {
        request.inputs = vec![tensor("features", shape)];
        request.raw_input_contents = vec![Bytes::from(raw)];
    } else {
        request.inputs = vec![tensor("x", shape), tensor("y", vec![1])];
        request.raw_input_contents =
            vec![Bytes::from(raw), Bytes::from(1.0f32.to_le_bytes().to_vec())];
        request.outputs = vec![InferRequestedOutputTensor {
            name: "y_out".into(),
            ..Default::default()
        }];
    }
    request
}

/// Sends one HTTP request and reads the whole response; panics on a non-200.
fn http_round_trip<S: Read + Write>(stream: &mut BufReader<S>, request: &[u8]) {
    stream.get_mut().write_all(request).expect("write");
    let mut line = String::new();
    stream.read_line(&mut line).expect("status line");
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let mut length = 0usize;
    loop {
        line.clear();
        stream.read_line(&mut line).expect("header");
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().expect("content-length");
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).expect("body");
}

fn server_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("server stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("stat")
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_secs_f64(ticks as f64 / 100.0)
}

struct Server {
    child: Child,
    http: String,
    grpc: String,
    http_uds: PathBuf,
    grpc_uds: PathBuf,
}

fn start_server(dir: &Path) -> Server {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = dir.join("models");
    std::fs::create_dir_all(repo.join("echo")).unwrap();
    std::fs::copy(
        root.join("benchmarks/models/echo/config.toml"),
        repo.join("echo/config.toml"),
    )
    .unwrap();
    let titanic = repo.join("titanic");
    std::fs::create_dir_all(&titanic).unwrap();
    for file in ["config.toml", "model.json"] {
        std::fs::copy(root.join("models/titanic").join(file), titanic.join(file)).unwrap();
    }
    let binary = std::env::var("WIRESPEED_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target/release/wirespeed"));
    let (http_uds, grpc_uds) = (dir.join("http.sock"), dir.join("grpc.sock"));
    let mut child = Command::new(&binary)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--models",
        ])
        .arg(&repo)
        .arg("--http-uds")
        .arg(&http_uds)
        .arg("--grpc-uds")
        .arg(&grpc_uds)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {}: {e}; build it with `cargo build --release -p wirespeed`",
                binary.display()
            )
        });
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut http, mut grpc) = (None, None);
    while http.is_none() || grpc.is_none() {
        let line = lines.next().expect("server log").unwrap();
        if let Some(a) = line.split("listening on http://").nth(1) {
            http = Some(a.trim().to_owned());
        }
        if let Some(a) = line.split("listening on grpc://").nth(1) {
            grpc = Some(a.trim().to_owned());
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Server {
        child,
        http: http.unwrap(),
        grpc: grpc.unwrap(),
        http_uds,
        grpc_uds,
    }
}

async fn grpc_client(server: &Server, uds: bool) -> Grpc {
    let channel = if uds {
        let path = server.grpc_uds.clone();
        tonic::transport::Endpoint::from_static("http://localhost")
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(8 << 20)
            .connect_with_connector(tower::service_fn(move |_| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }))
            .await
            .unwrap()
    } else {
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
            .unwrap()
            .initial_stream_window_size(4 << 20)
            .initial_connection_window_size(8 << 20)
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap()
    };
    GrpcInferenceServiceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dir = std::env::temp_dir().join(format!("wirespeed-transports-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = start_server(&dir);
    let pid = server.child.id();

    let mut cases = Vec::new();
    for rows in [1, 8] {
        cases.push(Case {
            model: "titanic",
            rows,
            cols: 12,
        });
    }
    for cols in [784, 65536, 262144] {
        for rows in [1, 8] {
            cases.push(Case {
                model: "echo",
                rows,
                cols,
            });
        }
    }
    let transports = [Transport::Json, Transport::Binary, Transport::Grpc];

    let mut http_tcp = BufReader::new(TcpStream::connect(&server.http).unwrap());
    http_tcp.get_ref().set_nodelay(true).unwrap();
    let mut http_uds = BufReader::new(UnixStream::connect(&server.http_uds).unwrap());
    let mut grpc_tcp = grpc_client(&server, false).await;
    let mut grpc_uds = grpc_client(&server, true).await;

    println!(
        "| model | shape | transport | socket | request bytes | p50 ms | server CPU ms/request |"
    );
    println!("|---|---|---|---|---:|---:|---:|");
    let only = std::env::var("ONLY").ok();
    for case in cases.iter().filter(|c| {
        only.as_deref()
            .is_none_or(|o| format!("{}:{}x{}", c.model, c.rows, c.cols).contains(o))
    }) {
        let json = http_request(case, false);
        let binary = http_request(case, true);
        let grpc = grpc_request(case);
        let grpc_bytes = prost::Message::encoded_len(&grpc);
        // Each block runs for at least BLOCK (so the server's CPU time, in
        // 10 ms ticks, is measured over many ticks) and MIN_REQUESTS.
        // transport × socket → (latencies, CPU)
        let mut results: Vec<(Vec<Duration>, Duration)> = vec![(Vec::new(), Duration::ZERO); 6];
        for round in 0..=rounds {
            for (t, transport) in transports.iter().enumerate() {
                for uds in [false, true] {
                    let slot = t * 2 + usize::from(uds);
                    let cpu0 = server_cpu(pid);
                    let started = Instant::now();
                    let mut n = 0;
                    while n < MIN_REQUESTS || started.elapsed() < BLOCK {
                        n += 1;
                        let t0 = Instant::now();
                        match (transport, uds) {
                            (Transport::Json, false) => http_round_trip(&mut http_tcp, &json),
                            (Transport::Json, true) => http_round_trip(&mut http_uds, &json),
                            (Transport::Binary, false) => http_round_trip(&mut http_tcp, &binary),
                            (Transport::Binary, true) => http_round_trip(&mut http_uds, &binary),
                            (Transport::Grpc, false) => {
                                grpc_tcp.model_infer(grpc.clone()).await.unwrap();
                            }
                            (Transport::Grpc, true) => {
                                grpc_uds.model_infer(grpc.clone()).await.unwrap();
                            }
                        }
                        // Round 0 warms up every path and is not counted.
                        if round > 0 {
                            results[slot].0.push(t0.elapsed());
                        }
                    }
                    if round > 0 {
                        results[slot].1 += server_cpu(pid) - cpu0;
                    }
                }
            }
        }
        for (t, transport) in transports.iter().enumerate() {
            for uds in [false, true] {
                let (mut samples, cpu) = std::mem::take(&mut results[t * 2 + usize::from(uds)]);
                samples.sort_unstable();
                let p50 = samples[samples.len() / 2];
                let bytes = match transport {
                    Transport::Json => json.len(),
                    Transport::Binary => binary.len(),
                    Transport::Grpc => grpc_bytes,
                };
                println!(
                    "| {} | {}×{} | {} | {} | {} | {:.3} | {:.3} |",
                    case.model,
                    case.rows,
                    case.cols,
                    transport.name(),
                    if uds { "unix" } else { "tcp" },
                    bytes,
                    p50.as_secs_f64() * 1e3,
                    cpu.as_secs_f64() * 1e3 / samples.len() as f64,
                );
            }
        }
    }
    let _ = server.child.kill();
    let _ = server.child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
