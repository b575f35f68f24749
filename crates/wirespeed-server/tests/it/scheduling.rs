//! A model's slots are held until its compute really ends, and a request
//! whose caller leaves is never computed once it has left: on REST (the
//! client disconnects) and gRPC (the deadline passes), for compute on the
//! CPU pool and through the async entry point. An async compute (a call to
//! another server) is cancelled when its caller leaves, and its slot comes
//! back then.

use std::sync::Arc;
use std::time::Duration;

use tonic::Code;
use wirespeed_models::Registry;
use wirespeed_proto::inference::model_infer_request::InferInputTensor;
use wirespeed_proto::inference::{InferTensorContents, ModelInferRequest};

use crate::support::{
    events, gated_body, gated_config, post, read_answer, send_post, Gate, Gated, Repository,
    Running,
};

/// A server with one gated model `name`.
async fn gated_server(
    name: &str,
    execution: &str,
    concurrency: usize,
    queue: usize,
) -> (Arc<Gate>, Repository, Running) {
    let gate = Arc::new(Gate::default());
    let repository = Repository::new(&[(name, &gated_config(execution, concurrency, queue))]);
    let mut registry = Registry::builtin();
    registry.register(Gated(Arc::clone(&gate)));
    let server = Running::start(repository.path(), registry).await;
    (gate, repository, server)
}

fn grpc_request(model: &str, deadline: Option<Duration>) -> tonic::Request<ModelInferRequest> {
    let mut request = tonic::Request::new(ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: "x".into(),
            datatype: "FP32".into(),
            shape: vec![1],
            contents: Some(InferTensorContents {
                fp32_contents: vec![4.0],
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    if let Some(deadline) = deadline {
        request.set_timeout(deadline);
    }
    request
}

/// Whether a call ended because its deadline passed: the server says so,
/// or tonic's client gave up first.
fn left(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled)
}

fn wait(gate: &Gate, what: &str, done: impl Fn(&crate::support::GateState) -> bool) {
    tokio::task::block_in_place(|| gate.wait_until(what, done));
}

fn wait_event(parts: &[&str]) {
    tokio::task::block_in_place(|| events().wait_for(parts));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rest_client_that_disconnects_mid_compute_keeps_a_pool_slot_and_cancels_an_async_one() {
    for execution in ["pool", "async"] {
        let name = format!("left_rest_{execution}");
        let (gate, _repository, server) = gated_server(&name, execution, 1, 0).await;
        let path = format!("/v2/models/{name}/infer");
        let first = send_post(server.http, &path, &[], &gated_body(&[1.0]));
        wait(&gate, "the first compute", |s| s.started == 1);
        drop(first);
        if execution == "async" {
            wait(&gate, "the cancellation", |s| s.cancelled == 1);
            gate.release(1);
            let second = post(server.http, &path, vec![], gated_body(&[2.0])).await;
            assert_eq!(second.status, 200, "the slot came back with the cancel");
            assert_eq!(second.json()["outputs"][0]["data"][0], 2.0);
            assert_eq!(gate.read(|s| (s.started, s.finished)), (2, 1));
            continue;
        }

        let second = post(server.http, &path, vec![], gated_body(&[2.0])).await;
        assert_eq!(second.status, 503, "{execution}: the slot is still taken");
        assert_eq!(second.header("retry-after"), Some("1"));
        assert!(second.json()["error"].as_str().unwrap().contains("busy"));

        gate.release(1);
        wait_event(&["compute ended", &format!("model={name}")]);
        gate.release(1);
        let third = post(server.http, &path, vec![], gated_body(&[3.0])).await;
        assert_eq!(third.status, 200, "{execution}");
        assert_eq!(third.json()["outputs"][0]["data"][0], 3.0);
        assert_eq!(
            gate.read(|s| (s.started, s.most_running)),
            (2, 1),
            "{execution}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_deadline_mid_compute_keeps_a_pool_slot_and_cancels_an_async_one() {
    for execution in ["pool", "async"] {
        let name = format!("left_grpc_{execution}");
        let (gate, _repository, server) = gated_server(&name, execution, 1, 0).await;
        let mut client = server.grpc_client().await;
        let mut first_client = client.clone();
        let request = grpc_request(&name, Some(Duration::from_millis(200)));
        let first = tokio::spawn(async move { first_client.model_infer(request).await });
        wait(&gate, "the first compute", |s| s.started == 1);
        let status = first.await.unwrap().unwrap_err();
        assert!(left(&status), "{execution}: {status:?}");
        if execution == "async" {
            wait(&gate, "the cancellation", |s| s.cancelled == 1);
            gate.release(1);
            let second = client.model_infer(grpc_request(&name, None)).await.unwrap();
            assert_eq!(
                second.get_ref().raw_output_contents[0][..],
                4f32.to_le_bytes()
            );
            continue;
        }
        assert_eq!(gate.read(|s| s.finished), 0, "still computing");

        let second = client
            .model_infer(grpc_request(&name, None))
            .await
            .unwrap_err();
        assert_eq!(
            second.code(),
            Code::ResourceExhausted,
            "{execution}: {second:?}"
        );

        gate.release(1);
        wait_event(&["compute ended", &format!("model={name}")]);
        gate.release(1);
        let third = client.model_infer(grpc_request(&name, None)).await.unwrap();
        assert_eq!(
            third.get_ref().raw_output_contents[0][..],
            4f32.to_le_bytes()
        );
        assert_eq!(
            gate.read(|s| (s.started, s.most_running)),
            (2, 1),
            "{execution}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_whose_caller_leaves_is_never_computed() {
    let name = "left_queue";
    let (gate, _repository, server) = gated_server(name, "pool", 1, 4).await;
    let path = format!("/v2/models/{name}/infer");
    let first = send_post(server.http, &path, &[], &gated_body(&[1.0]));
    wait(&gate, "the first compute", |s| s.started == 1);

    // The second waits in the queue until its deadline passes.
    let mut client = server.grpc_client().await;
    let mut second_client = client.clone();
    let request = grpc_request(name, Some(Duration::from_millis(300)));
    let second = tokio::spawn(async move { second_client.model_infer(request).await });
    wait_event(&["queued", &format!("model={name}")]);
    let status = second.await.unwrap().unwrap_err();
    assert!(left(&status), "{status:?}");
    // The server lets go at the deadline, or when tonic's client, giving up
    // first, resets the stream.
    wait_event(&["the caller left while queued", &format!("model={name}")]);

    gate.release(1);
    let answer = tokio::task::spawn_blocking(move || read_answer(first))
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    wait_event(&["dropped without computing", &format!("model={name}")]);

    gate.release(1);
    let third = client.model_infer(grpc_request(name, None)).await.unwrap();
    assert_eq!(third.get_ref().outputs[0].name, "y");
    assert_eq!(
        gate.read(|s| s.started),
        2,
        "the second request never computed"
    );
}
