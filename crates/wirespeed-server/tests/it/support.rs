//! A server started in process on free ports, a `gated` backend whose
//! every compute waits for the test to release it, the log events the
//! server writes, and a plain HTTP/1.1 exchange.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;
use wirespeed_core::{Error, Execution, InferCall, InferFuture, Model, ModelMetadata, Tensor};
use wirespeed_models::{Backend, ModelSource, Registry};
use wirespeed_server::{Server, ServerConfig};

/// The longest a test waits for an event that should come at once: only a
/// safety net, so a broken server fails the test rather than hanging it.
pub(crate) const SAFETY: Duration = Duration::from_secs(30);

/// What the gated models have done, and the computes the test has let go.
#[derive(Default)]
pub(crate) struct GateState {
    pub(crate) started: usize,
    pub(crate) finished: usize,
    pub(crate) running: usize,
    pub(crate) most_running: usize,
    /// Async computes dropped before they ended (their caller left).
    pub(crate) cancelled: usize,
    /// The first input's FP32 values of each compute, in the order they
    /// started.
    pub(crate) computed: Vec<Vec<f32>>,
    released: usize,
}

/// Shared by the test and the gated models it loads.
pub(crate) struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// For the async entry point: computes let go.
    released: tokio::sync::Semaphore,
}

impl Default for Gate {
    fn default() -> Gate {
        Gate {
            state: Mutex::default(),
            changed: Condvar::new(),
            released: tokio::sync::Semaphore::new(0),
        }
    }
}

impl Gate {
    /// Lets `n` computes finish.
    pub(crate) fn release(&self, n: usize) {
        self.state.lock().unwrap().released += n;
        self.released.add_permits(n);
        self.changed.notify_all();
    }

    /// Waits until `done` holds of the state.
    pub(crate) fn wait_until(&self, what: &str, done: impl Fn(&GateState) -> bool) {
        let state = self.state.lock().unwrap();
        let (state, timeout) = self
            .changed
            .wait_timeout_while(state, SAFETY, |s| !done(s))
            .unwrap();
        assert!(!timeout.timed_out(), "waited for {what}");
        drop(state);
    }

    /// A snapshot.
    pub(crate) fn read<T>(&self, f: impl Fn(&GateState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    fn start(&self, inputs: &[Tensor]) -> usize {
        let mut s = self.state.lock().unwrap();
        if let Some(wirespeed_core::TensorData::Fp32(v)) = inputs.first().map(|t| &t.data) {
            s.computed.push(v.clone());
        }
        s.started += 1;
        s.running += 1;
        s.most_running = s.most_running.max(s.running);
        self.changed.notify_all();
        s.started
    }

    fn finish(&self) {
        let mut s = self.state.lock().unwrap();
        s.running -= 1;
        s.finished += 1;
        self.changed.notify_all();
    }

    fn cancel(&self) {
        let mut s = self.state.lock().unwrap();
        s.running -= 1;
        s.cancelled += 1;
        self.changed.notify_all();
    }
}

/// Counts an async compute as cancelled if it is dropped before it ends.
struct Computing<'a> {
    gate: &'a Gate,
    ended: bool,
}

impl Drop for Computing<'_> {
    fn drop(&mut self) {
        if self.ended {
            self.gate.finish();
        } else {
            self.gate.cancel();
        }
    }
}

/// `backend = "gated"`: an identity model whose every compute counts
/// itself and waits until the test releases it. `execution = "pool"` (the
/// CPU pool, through `infer`) or `"async"` (through `infer_async`).
pub(crate) struct Gated(pub(crate) Arc<Gate>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GatedKeys {
    execution: String,
    /// Every compute fails with this message, once released.
    #[serde(default)]
    fail: Option<String>,
}

struct GatedModel {
    metadata: ModelMetadata,
    gate: Arc<Gate>,
    execution: Execution,
    fail: Option<String>,
}

impl Backend for Gated {
    fn name(&self) -> &'static str {
        "gated"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        let keys: GatedKeys = source.keys()?;
        let execution = match keys.execution.as_str() {
            "pool" => Execution::Pool,
            "async" => Execution::Async,
            other => return Err(format!("execution '{other}'?")),
        };
        let spec = |t: &wirespeed_models::TensorConfig| t.to_spec();
        let config = source.config();
        Ok(Arc::new(GatedModel {
            metadata: ModelMetadata {
                name: source.name().to_owned(),
                versions: vec![config.version.clone()],
                platform: "gated".into(),
                inputs: config.inputs.iter().map(spec).collect::<Result<_, _>>()?,
                outputs: config.outputs.iter().map(spec).collect::<Result<_, _>>()?,
            },
            gate: Arc::clone(&self.0),
            execution,
            fail: keys.fail,
        }))
    }
}

impl GatedModel {
    fn echo(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        if let Some(message) = &self.fail {
            return Err(Error::new(
                wirespeed_core::ErrorKind::BadGateway,
                message.clone(),
            ));
        }
        Ok(vec![Tensor {
            name: self.metadata.outputs[0].name.clone(),
            ..inputs[0].clone()
        }])
    }
}

impl Model for GatedModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn execution(&self, _: usize) -> Execution {
        self.execution
    }

    fn infer(&self, inputs: &[Tensor], _: &[usize]) -> Result<Vec<Tensor>, Error> {
        let n = self.gate.start(inputs);
        let state = self.gate.state.lock().unwrap();
        let state = self
            .gate
            .changed
            .wait_while(state, |s| s.released < n)
            .unwrap();
        drop(state);
        self.gate.finish();
        self.echo(inputs)
    }

    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        let inputs = call.inputs;
        Box::pin(async move {
            self.gate.start(&inputs);
            let mut computing = Computing {
                gate: &self.gate,
                ended: false,
            };
            self.gate
                .released
                .acquire()
                .await
                .expect("never closed")
                .forget();
            computing.ended = true;
            drop(computing);
            self.echo(&inputs)
        })
    }
}

/// A model repository in a temporary folder, removed when dropped.
pub(crate) struct Repository(PathBuf);

impl Repository {
    /// One folder per `(name, config.toml)`.
    pub(crate) fn new(models: &[(&str, &str)]) -> Repository {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("wirespeed-it-{}-{n}", std::process::id()));
        for (name, config) in models {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join("config.toml"), config).unwrap();
        }
        Repository(root)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Repository {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The config of a gated FP32 model.
pub(crate) fn gated_config(execution: &str, concurrency: usize, queue: usize) -> String {
    format!(
        "backend = 'gated'\nexecution = '{execution}'\nmax_concurrency = {concurrency}\n\
         max_queue = {queue}\n[[inputs]]\nname = 'x'\ndatatype = 'FP32'\nshape = [-1]\n\
         [[outputs]]\nname = 'y'\ndatatype = 'FP32'\nshape = [-1]\n"
    )
}

/// A server serving `models_dir` on free ports, stopped when dropped.
pub(crate) struct Running {
    pub(crate) http: SocketAddr,
    pub(crate) grpc: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Running {
    pub(crate) async fn start(models_dir: &Path, backends: Registry) -> Running {
        events();
        let config = ServerConfig {
            repositories: vec![models_dir.to_owned()],
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            compute_threads: 2,
            backends,
            ..ServerConfig::default()
        };
        Running::from_server(Server::bind(&config).await.expect("the server starts"))
    }

    /// Serves a bound server until dropped.
    pub(crate) fn from_server(server: Server) -> Running {
        let (http, grpc) = (server.http_addr().unwrap(), server.grpc_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Running {
            http,
            grpc,
            stop: Some(stop),
        }
    }

    pub(crate) async fn grpc_client(
        &self,
    ) -> wirespeed_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient<
        tonic::transport::Channel,
    > {
        wirespeed_proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient::connect(
            format!("http://{}", self.grpc),
        )
        .await
        .expect("the gRPC port answers")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A server's answer over HTTP/1.1: status, headers (lower-case names) and
/// body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes a POST of `body` to `path`, with `headers`, on a new connection,
/// and returns the connection before reading anything.
pub(crate) fn send_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(SAFETY)).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream
}

/// Reads one answer from `stream`.
pub(crate) fn read_answer(mut stream: TcpStream) -> Answer {
    let mut data = Vec::new();
    let mut buf = [0u8; 65536];
    let end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed without an answer");
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8(data[..end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = data[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the body ended early");
        body.extend_from_slice(&buf[..n]);
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// Posts and reads the answer, off the async runtime.
pub(crate) async fn post(
    addr: SocketAddr,
    path: &str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
) -> Answer {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || read_answer(send_post(addr, &path, &headers, &body)))
        .await
        .unwrap()
}

/// The server's debug events, as `message field=value ...` lines.
pub(crate) struct Events {
    lines: Mutex<VecDeque<String>>,
    added: Condvar,
}

impl Events {
    /// Waits for an event whose line contains every one of `parts`.
    pub(crate) fn wait_for(&self, parts: &[&str]) {
        self.wait_for_count(parts, 1);
    }

    /// Waits for `count` events whose lines contain every one of `parts`.
    pub(crate) fn wait_for_count(&self, parts: &[&str], count: usize) {
        let lines = self.lines.lock().unwrap();
        let (lines, timeout) = self
            .added
            .wait_timeout_while(lines, SAFETY, |lines| {
                lines
                    .iter()
                    .filter(|l| parts.iter().all(|p| l.contains(p)))
                    .count()
                    < count
            })
            .unwrap();
        if timeout.timed_out() {
            let seen: Vec<String> = lines.iter().cloned().collect();
            drop(lines);
            panic!("no event with {parts:?} in {seen:#?}");
        }
    }
}

struct Capture(&'static Events);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.insert_str(0, &format!("{value:?}"));
        } else {
            self.0.push_str(&format!(" {}={value:?}", field.name()));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            self.0.push_str(&format!(" {}={value}", field.name()));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let target = event.metadata().target();
        if !target.starts_with("wirespeed_server") && !target.starts_with("wirespeed_scheduler") {
            return;
        }
        let mut line = Line(String::new());
        event.record(&mut line);
        let mut lines = self.0.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.push_back(line.0);
        self.0.added.notify_all();
    }
}

/// The events of every server in this test binary (each test names its
/// own models, so they tell theirs apart).
pub(crate) fn events() -> &'static Events {
    static EVENTS: OnceLock<&'static Events> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let events: &'static Events = Box::leak(Box::new(Events {
            lines: Mutex::new(VecDeque::new()),
            added: Condvar::new(),
        }));
        let subscriber = tracing_subscriber::registry()
            .with(Capture(events).with_filter(tracing_subscriber::filter::LevelFilter::DEBUG));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        events
    })
}

/// The JSON body of a V2 request for the gated model.
pub(crate) fn gated_body(values: &[f32]) -> Vec<u8> {
    serde_json::json!({
        "inputs": [{"name": "x", "shape": [values.len()], "datatype": "FP32", "data": values}]
    })
    .to_string()
    .into_bytes()
}
