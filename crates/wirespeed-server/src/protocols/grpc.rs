//! The gRPC listener's service: one set of tonic routes for every
//! protocol's gRPC face (the Open Inference Protocol's, TF Serving's), the
//! standard health service, and reflection so that `grpcurl` can list and
//! call them; the bearer-token check and the access log around each call.
//! An uncompressed `ModelInfer` call is read from its frames
//! (`v2/grpc_frames.rs`) rather than through tonic's routes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tonic::codec::CompressionEncoding;
use tonic::Status;
use tonic_health::server::HealthReporter;
use wirespeed_core::Error;

use crate::protocols::auth::HealthCheck;
use crate::protocols::tfserving;
use crate::protocols::v2::grpc::{GrpcInferenceServiceServer, Inference};
use crate::protocols::Front;

use wirespeed_proto::tensorflow::serving::model_service_server::ModelServiceServer;
use wirespeed_proto::tensorflow::serving::prediction_service_server::PredictionServiceServer;

/// The gRPC status for an `error` outside the pipeline (which numbers and
/// logs its own): client errors say what was wrong.
pub(crate) fn status(error: &Error) -> Status {
    crate::protocols::v2::grpc_infer::status(error, error.public_message())
}

/// The client's deadline, from the `grpc-timeout` header.
pub(crate) fn deadline(metadata: &tonic::metadata::MetadataMap) -> Option<std::time::Duration> {
    wirespeed_http::grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// The protocol's empty version means the served one.
pub(crate) fn version(v: &str) -> Option<&str> {
    (!v.is_empty()).then_some(v)
}

/// Builds the inference, health and reflection services, with health
/// SERVING until [`not_serving`].
pub(crate) async fn service(front: Arc<Front>) -> (GrpcService, HealthReporter) {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<GrpcInferenceServiceServer<Inference>>()
        .await;
    // grpcurl and other tools speak either version of reflection. Each is
    // built on its first call: decoding every descriptor set costs about
    // half a MiB that a server nobody asks by reflection need not hold.
    let v1 = Lazy::new(|| {
        descriptors()
            .build_v1()
            .expect("the bundled descriptors are valid")
    });
    let v1alpha = Lazy::new(|| {
        descriptors()
            .build_v1alpha()
            .expect("the bundled descriptors are valid")
    });
    let inference = GrpcInferenceServiceServer::new(Inference {
        front: Arc::clone(&front),
    })
    .max_decoding_message_size(front.limits.max_grpc_message_bytes)
    .max_encoding_message_size(usize::MAX)
    // tritonclient.grpc's `compression_algorithm`: messages in gzip or
    // deflate are read (the size limit holds for the message
    // decompressed), and a client that compresses its requests gets its
    // answers compressed (`GrpcService::call`).
    .accept_compressed(CompressionEncoding::Gzip)
    .accept_compressed(CompressionEncoding::Deflate)
    .send_compressed(CompressionEncoding::Gzip)
    .send_compressed(CompressionEncoding::Deflate);
    // TF Serving's services, for its clients (port 8500's), on the same
    // listener and under the same message limit.
    let tf = || tfserving::grpc::TfServing {
        front: Arc::clone(&front),
    };
    let prediction = PredictionServiceServer::new(tf())
        .max_decoding_message_size(front.limits.max_grpc_message_bytes)
        .max_encoding_message_size(usize::MAX)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate);
    let model_service = ModelServiceServer::new(tf());
    let routes = tonic::service::Routes::new(health_service)
        .add_service(v1)
        .add_service(v1alpha)
        .add_service(inference)
        .add_service(prediction)
        .add_service(model_service)
        .prepare();
    (GrpcService { routes, front }, health)
}

/// The reflection services' descriptors: the inference protocol's, TF
/// Serving's and the health service's.
fn descriptors() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(wirespeed_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(wirespeed_proto::TF_FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// A gRPC service made on its first call, then shared by every clone.
struct Lazy<S> {
    service: Arc<std::sync::OnceLock<S>>,
    make: fn() -> S,
}

impl<S> Clone for Lazy<S> {
    fn clone(&self) -> Lazy<S> {
        Lazy {
            service: Arc::clone(&self.service),
            make: self.make,
        }
    }
}

impl<S> Lazy<S> {
    fn new(make: fn() -> S) -> Lazy<S> {
        Lazy {
            service: Arc::new(std::sync::OnceLock::new()),
            make,
        }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Lazy<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<hyper::Request<B>> for Lazy<S>
where
    S: tower::Service<hyper::Request<B>> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        // tonic's generated services are always ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<B>) -> S::Future {
        let mut service = self.service.get_or_init(self.make).clone();
        service.call(request)
    }
}

/// Reports NOT_SERVING for the server and the inference service.
pub(crate) async fn not_serving(health: &HealthReporter) {
    health
        .set_not_serving::<GrpcInferenceServiceServer<Inference>>()
        .await;
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
}

/// The gRPC listeners' service: the bearer-token check, then tonic's
/// routes.
#[derive(Clone)]
pub(crate) struct GrpcService {
    routes: tonic::service::Routes,
    front: Arc<Front>,
}

/// grpcio and most clients list gzip in `grpc-accept-encoding` on every
/// call, and tonic would then compress every answer: for a large tensor,
/// hundreds of milliseconds the client never asked for. Answers are
/// compressed only for a client that compresses its own messages
/// (`grpc-encoding`), as tritonclient's `compression_algorithm` does; for
/// the others the accepted codings are taken off the request before tonic
/// reads them. Triton, too, answers uncompressed unless told otherwise.
fn answer_uncompressed_unless_compressed(headers: &mut hyper::HeaderMap) {
    let compressed = headers
        .get("grpc-encoding")
        .is_some_and(|coding| coding.as_bytes() != b"identity");
    if !compressed {
        headers.remove("grpc-accept-encoding");
    }
}

/// gRPC's status-code table says RESOURCE_EXHAUSTED for a message larger
/// than the server takes, compressed or not, as grpc-go and Triton answer;
/// tonic answers OUT_OF_RANGE for an uncompressed one (and
/// RESOURCE_EXHAUSTED once decompressed). Its status, given before any
/// message (trailers-only), is set right here.
fn too_large_is_resource_exhausted(headers: &mut hyper::HeaderMap) {
    let out_of_range = headers
        .get("grpc-status")
        .is_some_and(|code| code.as_bytes() == b"11");
    let too_large = headers.get("grpc-message").is_some_and(|m| {
        m.as_bytes()
            .windows(15)
            .any(|w| w == b"length%20too%20" || w == b"length too larg")
    });
    if out_of_range && too_large {
        headers.insert("grpc-status", hyper::header::HeaderValue::from_static("8"));
    }
}

/// The body of a `ModelInfer` answer made of the model's default outputs:
/// its trailers say so (`wirespeed-default: true`), beside `grpc-status`.
struct DefaultTrailer {
    body: tonic::body::Body,
}

impl hyper::body::Body for DefaultTrailer {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        polled.map(|frame| {
            frame.map(|frame| {
                frame.map(|frame| match frame.into_trailers() {
                    Ok(mut trailers) => {
                        trailers.insert(
                            crate::protocols::http::response::DEFAULT_ANSWER,
                            hyper::header::HeaderValue::from_static("true"),
                        );
                        hyper::body::Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                })
            })
        })
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The health checks among the RPCs, which answer without the token.
fn health_check(path: &str) -> Option<HealthCheck> {
    if path.starts_with("/grpc.health.v1.Health/") {
        return Some(HealthCheck::ServerReady);
    }
    match path {
        "/inference.GRPCInferenceService/ServerLive" => Some(HealthCheck::ServerLive),
        "/inference.GRPCInferenceService/ServerReady" => Some(HealthCheck::ServerReady),
        "/inference.GRPCInferenceService/ModelReady" => Some(HealthCheck::ModelReady),
        _ => None,
    }
}

impl hyper::service::Service<hyper::Request<wirespeed_http::RequestBody>> for GrpcService {
    type Response = hyper::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, mut request: hyper::Request<wirespeed_http::RequestBody>) -> Self::Future {
        answer_uncompressed_unless_compressed(request.headers_mut());
        let health = health_check(request.uri().path());
        if let Err(e) = self.front.auth.check(request.headers(), health) {
            let response = status(&e).into_http();
            return Box::pin(async move { Ok(response) });
        }
        let routes = self.routes.clone();
        let front = Arc::clone(&self.front);
        let access = tracing::enabled!(target: "wirespeed_server::access", tracing::Level::INFO)
            .then(|| (std::time::Instant::now(), request.uri().path().to_owned()));
        Box::pin(async move {
            let response = if crate::protocols::v2::grpc_frames::takes(&request) {
                Ok(crate::protocols::v2::grpc_frames::model_infer(&front, request).await)
            } else {
                tower::ServiceExt::oneshot(routes, request).await
            };
            if let (Some((started, path)), Ok(response)) = (access, &response) {
                // The access log (`--access-log`): a failed call's status
                // comes in its headers (trailers-only), a success's is OK.
                let status = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("0")
                    .to_owned();
                tracing::info!(
                    target: "wirespeed_server::access",
                    protocol = "grpc",
                    path,
                    grpc_status = status,
                    micros = started.elapsed().as_micros() as u64,
                );
            }
            response.map(|mut r| {
                too_large_is_resource_exhausted(r.headers_mut());
                match r
                    .extensions()
                    .get::<crate::protocols::v2::grpc_infer::DefaultAnswer>()
                {
                    Some(_) => r.map(|body| tonic::body::Body::new(DefaultTrailer { body })),
                    None => r,
                }
            })
        })
    }
}
