//! The scheduler batches, orders and answers as `[batching]`, `[queue]`
//! and `[slo]` say. A gated model holds its first compute, so the requests
//! after it wait in the queue, in a known state, until the test lets go;
//! the gate records what each compute was given.

use std::net::TcpStream;
use std::sync::Arc;

use serde_json::{json, Value};
use wirespeed_models::Registry;

use crate::support::{events, read_answer, send_post, Answer, Gate, Gated, Repository, Running};

/// A server with gated models `(name, config.toml)`, sharing one gate.
async fn serve(models: &[(&str, String)]) -> (Arc<Gate>, Repository, Running) {
    let gate = Arc::new(Gate::default());
    let configs: Vec<(&str, &str)> = models.iter().map(|(n, c)| (*n, c.as_str())).collect();
    let repository = Repository::new(&configs);
    let mut registry = Registry::builtin();
    registry.register(Gated(Arc::clone(&gate)));
    let server = Running::start(repository.path(), registry).await;
    (gate, repository, server)
}

/// A gated FP32 model of `rank` dimensions (`-1` each), computing one
/// execution at a time on `execution`, with the config's `tables` after.
fn config(execution: &str, rank: usize, tables: &str) -> String {
    config_with(execution, rank, "", tables)
}

/// `config`, with top-level `keys` of the gated backend's own.
fn config_with(execution: &str, rank: usize, keys: &str, tables: &str) -> String {
    let shape = vec!["-1"; rank].join(", ");
    format!(
        "backend = 'gated'\nexecution = '{execution}'\nmax_concurrency = 1\n{keys}\
         [[inputs]]\nname = 'x'\ndatatype = 'FP32'\nshape = [{shape}]\n\
         [[outputs]]\nname = 'y'\ndatatype = 'FP32'\nshape = [{shape}]\n{tables}"
    )
}

/// Sends a V2 request of `x` in `shape`, with request `parameters`.
fn send(server: &Running, model: &str, shape: &[usize], x: &[f32], parameters: Value) -> TcpStream {
    let body = json!({
        "inputs": [{"name": "x", "shape": shape, "datatype": "FP32", "data": x}],
        "parameters": parameters,
    });
    send_post(
        server.http,
        &format!("/v2/models/{model}/infer"),
        &[],
        body.to_string().as_bytes(),
    )
}

fn answer(stream: TcpStream) -> Answer {
    tokio::task::block_in_place(|| read_answer(stream))
}

fn wait_queued(model: &str, count: usize) {
    let model = format!("model={model}");
    tokio::task::block_in_place(|| events().wait_for_count(&["queued", &model], count));
}

fn wait_started(gate: &Gate, n: usize) {
    tokio::task::block_in_place(|| gate.wait_until("computes to start", |s| s.started >= n));
}

/// The rows of the batch an answer ran in, from its `Server-Timing`.
fn batch_rows(answer: &Answer) -> Option<usize> {
    let timing = answer.header("server-timing")?;
    let entry = timing.split(", ").find(|e| e.starts_with("batch;desc="))?;
    entry["batch;desc=".len()..].parse().ok()
}

fn output(answer: &Answer) -> Vec<f32> {
    let body = answer.json();
    body["outputs"][0]["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no output in {body}"))
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_run_as_one_batch_and_each_gets_its_own_rows() {
    let name = "rows";
    let (gate, _repository, server) =
        serve(&[(name, config("pool", 1, "[batching]\nmax_batch_size = 8\n"))]).await;
    let first = send(&server, name, &[1], &[0.5], json!({}));
    wait_started(&gate, 1);
    let sizes = [1, 2, 1, 3, 1];
    let sent: Vec<(Vec<f32>, TcpStream)> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let x: Vec<f32> = (0..n).map(|i| (10 * (k + 1) + i) as f32).collect();
            let stream = send(&server, name, &[n], &x, json!({}));
            (x, stream)
        })
        .collect();
    wait_queued(name, sizes.len());
    gate.release(2);
    for (x, stream) in sent {
        let a = answer(stream);
        assert_eq!(a.status, 200, "{}", a.json());
        assert_eq!(output(&a), x, "each request gets exactly its own rows");
        assert_eq!(batch_rows(&a), Some(8));
    }
    let a = answer(first);
    assert_eq!((output(&a), batch_rows(&a)), (vec![0.5], Some(1)));
    assert_eq!(gate.read(|s| s.started), 2, "one execution for the five");
    assert_eq!(gate.read(|s| s.computed[1].len()), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_differ_are_not_batched_together() {
    let name = "shapes";
    let (gate, _repository, server) =
        serve(&[(name, config("pool", 2, "[batching]\nmax_batch_size = 8\n"))]).await;
    let first = send(&server, name, &[1, 1], &[0.5], json!({}));
    wait_started(&gate, 1);
    // Two of [1, 2], one of [1, 3], and one of [1, 2] with another
    // parameter: three batches.
    let requests = [
        (vec![1, 2], vec![1.0, 2.0], json!({})),
        (vec![1, 3], vec![3.0, 4.0, 5.0], json!({})),
        (vec![1, 2], vec![6.0, 7.0], json!({})),
        (vec![1, 2], vec![8.0, 9.0], json!({"tenant": "b"})),
    ];
    let sent: Vec<(Vec<f32>, TcpStream)> = requests
        .into_iter()
        .map(|(shape, x, p)| {
            let stream = send(&server, name, &shape, &x, p);
            (x, stream)
        })
        .collect();
    wait_queued(name, 4);
    gate.release(4);
    let mut rows = Vec::new();
    for (x, stream) in sent {
        let a = answer(stream);
        assert_eq!(a.status, 200, "{}", a.json());
        assert_eq!(output(&a), x);
        rows.push(batch_rows(&a));
    }
    assert_eq!(rows, [Some(2), Some(1), Some(2), Some(1)]);
    assert_eq!(answer(first).status, 200);
    assert_eq!(gate.read(|s| s.started), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_batch_fails_each_request_with_the_models_error() {
    let name = "failing";
    let config = config_with(
        "pool",
        1,
        "fail = 'the model refused'\n",
        "[batching]\nmax_batch_size = 8\n",
    );
    let (gate, _repository, server) = serve(&[(name, config)]).await;
    let first = send(&server, name, &[1], &[0.5], json!({}));
    wait_started(&gate, 1);
    let sent: Vec<TcpStream> = (0..3)
        .map(|k| send(&server, name, &[1], &[k as f32], json!({})))
        .collect();
    wait_queued(name, 3);
    gate.release(2);
    for stream in sent.into_iter().chain([first]) {
        let a = answer(stream);
        assert_eq!(a.status, 502, "{}", a.json());
        let error = a.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains("the model refused"), "{error}");
    }
    assert_eq!(gate.read(|s| s.started), 2, "the three failed in one batch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_size_goes_at_once_and_a_lone_request_after_the_delay() {
    let (gate, _repository, server) = serve(&[
        (
            "preferred",
            config(
                "pool",
                1,
                "[batching]\nmax_batch_size = 8\npreferred_batch_sizes = [4]\nmax_queue_delay_us = 60000000\n",
            ),
        ),
        (
            "delayed",
            config("pool", 1, "[batching]\nmax_batch_size = 8\nmax_queue_delay_us = 200000\n"),
        ),
    ])
    .await;
    // With a delay configured, even the first request waits for company.
    let three: Vec<TcpStream> = (0..3)
        .map(|k| send(&server, "preferred", &[1], &[k as f32], json!({})))
        .collect();
    wait_queued("preferred", 3);
    assert_eq!(gate.read(|s| s.started), 0, "three rows wait for a fourth");
    let fourth = send(&server, "preferred", &[1], &[3.0], json!({}));
    wait_started(&gate, 1);
    gate.release(1);
    for stream in three.into_iter().chain([fourth]) {
        assert_eq!(batch_rows(&answer(stream)), Some(4));
    }

    let lone = send(&server, "delayed", &[1], &[9.0], json!({}));
    wait_started(&gate, 2);
    gate.release(1);
    let a = answer(lone);
    assert_eq!((output(&a), batch_rows(&a)), (vec![9.0], Some(1)));
    let timing = a.header("server-timing").unwrap_or_default().to_owned();
    let queue: f64 = timing
        .split(", ")
        .find_map(|e| e.strip_prefix("queue;dur="))
        .and_then(|d| d.parse().ok())
        .unwrap_or_default();
    assert!(queue >= 200.0, "it waited the delay for company: {timing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn higher_priorities_and_requests_within_their_timeout_go_first() {
    let name = "levels";
    let tables = "[queue]\npriority_levels = 2\ndefault_priority_level = 2\n";
    let (gate, _repository, server) = serve(&[(name, config("async", 1, tables))]).await;
    let first = send(&server, name, &[1], &[0.0], json!({}));
    wait_started(&gate, 1);
    // One at a time into the queue: within a level, arrival is the order.
    let low = send(&server, name, &[1], &[1.0], json!({"priority": 2}));
    wait_queued(name, 1);
    let default = send(&server, name, &[1], &[2.0], json!({}));
    wait_queued(name, 2);
    // Its queue timeout passes at once: under "reject", a 503.
    let impatient = send(&server, name, &[1], &[3.0], json!({"timeout": 1}));
    let high = send(&server, name, &[1], &[4.0], json!({"priority": 1}));
    wait_queued(name, 4);
    let a = answer(impatient);
    assert_eq!(a.status, 503, "{}", a.json());
    let error = a.json()["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("request timeout expired"), "{error}");
    gate.release(4);
    for stream in [first, low, default, high] {
        let a = answer(stream);
        assert_eq!(a.status, 200);
        assert_eq!(batch_rows(&a), None, "the model does not batch");
    }
    let order = gate.read(|s| s.computed.clone());
    assert_eq!(order, [vec![0.0], vec![4.0], vec![1.0], vec![2.0]]);

    let bad = answer(send(&server, name, &[1], &[0.0], json!({"priority": -1})));
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]
        .as_str()
        .unwrap_or_default()
        .contains("'priority'"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_request_waits_behind_those_within_their_timeout() {
    let name = "delay_action";
    let tables = "[queue]\ntimeout_action = 'delay'\n";
    let (gate, _repository, server) = serve(&[(name, config("pool", 1, tables))]).await;
    let first = send(&server, name, &[1], &[0.0], json!({}));
    wait_started(&gate, 1);
    let late = send(&server, name, &[1], &[1.0], json!({"timeout": 1}));
    // A timeout past any clock's end is no timeout at all.
    let forever = json!({"timeout": i64::MAX});
    let patient = send(&server, name, &[1], &[2.0], forever);
    wait_queued(name, 2);
    gate.release(3);
    for stream in [first, late, patient] {
        assert_eq!(answer(stream).status, 200);
    }
    let order = gate.read(|s| s.computed.clone());
    assert_eq!(order, [vec![0.0], vec![2.0], vec![1.0]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_objective_get_the_flagged_default() {
    let name = "objective";
    let tables = "[slo]\nlatency_ms = 150\ndefault_output = { y = [-1.5] }\n";
    let (gate, _repository, server) = serve(&[(name, config("async", 1, tables))]).await;
    // The first computes past its objective; the second waits behind it.
    let first = send(&server, name, &[2], &[1.0, 2.0], json!({}));
    wait_started(&gate, 1);
    let second = send(&server, name, &[1], &[3.0], json!({}));
    for (stream, rows) in [(first, 2), (second, 1)] {
        let a = answer(stream);
        assert_eq!(a.status, 200, "{}", a.json());
        assert_eq!(output(&a), vec![-1.5; rows]);
        let body = a.json();
        assert_eq!(body["parameters"]["default"], true, "{body}");
        assert!(body["parameters"]["default_explanation"]
            .as_str()
            .is_some_and(|e| e.contains("latency SLO")));
        assert_eq!(a.header("wirespeed-default"), Some("true"));
    }
    // Once its default is out, nobody waits for the first's compute: a
    // model that awaits is cancelled, and its slot comes back.
    tokio::task::block_in_place(|| {
        gate.wait_until("the first compute to be cancelled", |s| s.cancelled >= 1)
    });
    gate.release(2);
}
