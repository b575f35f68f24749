//! The same good and bad requests through every front end: V2 JSON, V2
//! binary, a raw body, TF Serving, Clipper, gRPC and gRPC streaming give
//! the same outputs and the same kind of error. The good answer is the
//! `xgboost` package's probability for the README's passenger
//! (`models/PROVENANCE.txt`).

use std::path::PathBuf;

use tokio_stream::StreamExt;
use tonic::Code;
use wirespeed_proto::inference::model_infer_request::InferInputTensor;
use wirespeed_proto::inference::ModelInferRequest;
use wirespeed_server::{RequestLimits, Server, ServerConfig};

use crate::support::{post, Answer, Running};

/// Passenger 904 of the Titanic test set, as the model takes it.
const PASSENGER: [f32; 12] = [
    1.0,
    0.0,
    1.0,
    0.2875,
    0.333_333_34,
    0.0,
    0.322667,
    0.0,
    1.0,
    0.0,
    0.0,
    0.0,
];

/// `xgboost.Booster.predict` on that row, as float32.
const PROBABILITY: f32 = 0.454_042_1;

/// What a front end answered, in the terms every front end shares.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    /// The model's first output for the one row.
    Probability(f32),
    /// An error: its kind (an HTTP status; gRPC codes mapped to the
    /// statuses they stand for; `None` where the protocol gives only text)
    /// and its message.
    Error(Option<u16>, String),
}

#[derive(Debug, Clone, Copy)]
enum FrontEnd {
    V2Json,
    V2Binary,
    V2Raw,
    TfServing,
    Clipper,
    Grpc,
    GrpcStream,
}

const EVERY_FRONT_END: [FrontEnd; 7] = [
    FrontEnd::V2Json,
    FrontEnd::V2Binary,
    FrontEnd::V2Raw,
    FrontEnd::TfServing,
    FrontEnd::Clipper,
    FrontEnd::Grpc,
    FrontEnd::GrpcStream,
];

fn models() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

fn raw_bytes(row: &[f32]) -> Vec<u8> {
    row.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn http_outcome(answer: &Answer, front: FrontEnd) -> Outcome {
    if answer.status != 200 {
        let body = answer.json();
        let message = match front {
            FrontEnd::Clipper => body["cause"].as_str(),
            _ => body["error"].as_str(),
        };
        return Outcome::Error(Some(answer.status), message.unwrap_or_default().to_owned());
    }
    let body = &answer.body;
    let value = match front {
        FrontEnd::V2Json | FrontEnd::V2Binary => answer.json()["outputs"][0]["data"][0].as_f64(),
        FrontEnd::V2Raw => {
            let header: usize = answer
                .header("inference-header-content-length")
                .expect("a binary answer")
                .parse()
                .unwrap();
            let raw: [u8; 4] = body[header..header + 4].try_into().unwrap();
            Some(f64::from(f32::from_le_bytes(raw)))
        }
        FrontEnd::TfServing => answer.json()["predictions"][0]["probability"].as_f64(),
        FrontEnd::Clipper => answer.json()["output"].as_f64(),
        FrontEnd::Grpc | FrontEnd::GrpcStream => unreachable!(),
    };
    Outcome::Probability(value.expect("a number") as f32)
}

fn grpc_status(code: Code) -> u16 {
    match code {
        Code::InvalidArgument => 400,
        Code::NotFound => 404,
        Code::ResourceExhausted => 503,
        other => panic!("unexpected {other:?}"),
    }
}

/// Sends `row` to `model` through `front`.
async fn ask(server: &Running, front: FrontEnd, model: &str, row: &[f32]) -> Outcome {
    let shape = vec![1, row.len() as i64];
    let v2_path = format!("/v2/models/{model}/infer");
    let answer = match front {
        FrontEnd::V2Json => {
            let body = serde_json::json!({"inputs": [
                {"name": "features", "shape": shape, "datatype": "FP32", "data": row}]});
            post(server.http, &v2_path, vec![], body.to_string().into_bytes()).await
        }
        FrontEnd::V2Binary => {
            let raw = raw_bytes(row);
            let header = serde_json::json!({"inputs": [
                {"name": "features", "shape": shape, "datatype": "FP32",
                 "parameters": {"binary_data_size": raw.len()}}]})
            .to_string();
            let length = ("Inference-Header-Content-Length", header.len().to_string());
            let body = [header.into_bytes(), raw].concat();
            post(server.http, &v2_path, vec![length], body).await
        }
        FrontEnd::V2Raw => {
            let length = ("Inference-Header-Content-Length", "0".to_owned());
            post(server.http, &v2_path, vec![length], raw_bytes(row)).await
        }
        FrontEnd::TfServing => {
            let body = serde_json::json!({ "instances": [row] });
            let path = format!("/v1/models/{model}:predict");
            post(server.http, &path, vec![], body.to_string().into_bytes()).await
        }
        FrontEnd::Clipper => {
            let body = serde_json::json!({ "input": row });
            let path = format!("/{model}/predict");
            post(server.http, &path, vec![], body.to_string().into_bytes()).await
        }
        FrontEnd::Grpc | FrontEnd::GrpcStream => {
            let request = ModelInferRequest {
                model_name: model.into(),
                inputs: vec![InferInputTensor {
                    name: "features".into(),
                    datatype: "FP32".into(),
                    shape,
                    ..Default::default()
                }],
                raw_input_contents: vec![raw_bytes(row).into()],
                ..Default::default()
            };
            let mut client = server.grpc_client().await;
            let response = if let FrontEnd::GrpcStream = front {
                let reply = client
                    .model_stream_infer(tokio_stream::once(request))
                    .await
                    .unwrap()
                    .into_inner()
                    .next()
                    .await
                    .expect("one answer")
                    .unwrap();
                if !reply.error_message.is_empty() {
                    return Outcome::Error(None, reply.error_message);
                }
                reply.infer_response.unwrap()
            } else {
                match client.model_infer(request).await {
                    Ok(response) => response.into_inner(),
                    Err(status) => {
                        let code = grpc_status(status.code());
                        return Outcome::Error(Some(code), status.message().to_owned());
                    }
                }
            };
            let raw: [u8; 4] = response.raw_output_contents[0][..4].try_into().unwrap();
            return Outcome::Probability(f32::from_le_bytes(raw));
        }
    };
    http_outcome(&answer, front)
}

/// Checks that every front end answers `row` to `model` as `expected` says.
async fn every_front_end(
    server: &Running,
    model: &str,
    row: &[f32],
    expected: impl Fn(FrontEnd, &Outcome) -> Result<(), String>,
) {
    for front in EVERY_FRONT_END {
        let outcome = ask(server, front, model, row).await;
        if let Err(why) = expected(front, &outcome) {
            panic!(
                "{front:?}, model {model}, {} values: {why}: {outcome:?}",
                row.len()
            );
        }
    }
}

/// An error of `status` whose message contains `words` (when the front end
/// words it as the others do).
fn error(status: u16, words: &'static str) -> impl Fn(FrontEnd, &Outcome) -> Result<(), String> {
    move |front, outcome| match outcome {
        Outcome::Error(got, message) => {
            if got.is_some_and(|got| got != status) {
                return Err(format!("status {got:?}, not {status}"));
            }
            // A raw body has no shape of its own, so it is refused for
            // not fitting rather than for its shape.
            let worded_alike = !matches!(front, FrontEnd::V2Raw);
            if worded_alike && !message.contains(words) {
                return Err(format!("the message lacks {words:?}"));
            }
            Ok(())
        }
        Outcome::Probability(_) => Err("no error".into()),
    }
}

/// The bundled models, served with `limits`.
async fn titanic_server(limits: RequestLimits) -> Running {
    crate::support::events();
    let config = ServerConfig {
        repositories: vec![models()],
        http_addr: Some("127.0.0.1:0".parse().unwrap()),
        grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
        compute_threads: 2,
        request_limits: limits,
        ..ServerConfig::default()
    };
    Running::from_server(Server::bind(&config).await.expect("the server starts"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_end_gives_the_same_answer_and_the_same_errors() {
    let server = titanic_server(RequestLimits::default()).await;
    every_front_end(&server, "titanic", &PASSENGER, |_, outcome| match outcome {
        Outcome::Probability(p) if *p == PROBABILITY => Ok(()),
        _ => Err(format!("not xgboost's {PROBABILITY}")),
    })
    .await;
    every_front_end(
        &server,
        "titanic",
        &PASSENGER[..11],
        error(400, "for model 'titanic'. Expected [-1,12], got [1,11]"),
    )
    .await;
    every_front_end(
        &server,
        "no_such_model",
        &PASSENGER,
        error(
            404,
            "Request for unknown model: 'no_such_model' is not found",
        ),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_end_holds_requests_to_the_same_limits() {
    let limits = RequestLimits {
        max_elements: 5,
        ..RequestLimits::default()
    };
    let server = titanic_server(limits).await;
    every_front_end(
        &server,
        "titanic",
        &PASSENGER,
        error(400, "over the limits of 5 elements and"),
    )
    .await;
}
