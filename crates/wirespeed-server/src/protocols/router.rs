//! Maps a method and path to an endpoint of the Open Inference Protocol.

use hyper::Method;
use wirespeed_core::{Error, ErrorKind};

use crate::protocols::openai::Endpoint;
use crate::protocols::tfserving::examples::Verb;
use crate::protocols::v2::missing::Missing;

use wirespeed_engine::pipeline::Target;

/// The endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `GET /v2/health/live`
    Live,
    /// `GET /v2/health/ready`
    Ready,
    /// KServe v1: `GET /`, the server is alive.
    Root,
    /// KServe v1: `GET /v1/models`, the served models' names.
    ModelList,
    /// `GET /v2`
    ServerMetadata,
    /// `GET /v2/models/{name}[/versions/{v}]`
    ModelMetadata(Target<'a>),
    /// `GET /v2/models/{name}[/versions/{v}]/ready`
    ModelReady(Target<'a>),
    /// `POST /v2/models/{name}[/versions/{v}]/infer`
    Infer(Target<'a>),
    /// `POST /v2/models/{name}[/versions/{v}]/generate`,
    /// `.../generate_stream` and MLServer's `.../infer_stream`
    Generate(Target<'a>, Streaming),
    /// `GET /v2/models/{name}[/versions/{v}]/config`
    ModelConfig(Target<'a>),
    /// `GET /v2/models/stats` (every model, `name` empty) and
    /// `GET /v2/models/{name}[/versions/{v}]/stats`
    ModelStats(Target<'a>),
    /// TF Serving: `GET /v1/models/{name}[/versions/{v}]`
    TfStatus(Target<'a>),
    /// TF Serving: `GET /v1/models/{name}[/versions/{v}]/metadata`
    TfMetadata(Target<'a>),
    /// TF Serving: `POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict`
    TfPredict(Target<'a>),
    /// TF Serving: `POST /v1/models/{name}[/versions/{v}|/labels/{l}]:classify`
    /// and `:regress`
    TfExamples(Target<'a>, Verb),
    /// A verb TF Serving does not have (KServe v1's `:explain`, a typo).
    TfOtherVerb(&'a str),
    /// Clipper: `POST /{app}/predict`
    ClipperPredict(&'a str),
    /// Clipper: `POST /{app}/update`, feedback for an application
    ClipperUpdate(&'a str),
    /// OpenAI: `POST /v1/embeddings`, `/v1/chat/completions`, `/v1/completions`
    OpenAi(crate::protocols::openai::Endpoint),
    /// Triton's shared-memory extensions:
    /// `/v2/{systemsharedmemory|cudasharedmemory}[/region/{name}]/{status|register|unregister}`
    /// (register always names a region).
    SharedMemory(SharedMemoryRoute<'a>),
    /// `GET /metrics`: Prometheus metrics, as on `--metrics ADDR`.
    Metrics,
    /// `POST /v2/repository/index`
    RepositoryIndex,
    /// `POST /v2/repository/models/{name}/load`
    RepositoryLoad(&'a str),
    /// `POST /v2/repository/models/{name}/unload`
    RepositoryUnload(&'a str),
    /// Triton endpoints known and not served yet: a 501 saying which.
    Missing(crate::protocols::v2::missing::Missing),
}

/// A shared-memory endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SharedMemoryRoute<'a> {
    /// CUDA rather than system shared memory.
    pub(crate) cuda: bool,
    /// The region named in the path; empty for all of them.
    pub(crate) region: &'a str,
    pub(crate) action: SharedMemoryAction,
}

/// What a shared-memory endpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedMemoryAction {
    Status,
    Register,
    Unregister,
}

impl Route<'_> {
    /// Whether the endpoint answers from what the server holds, waiting
    /// for nothing (no body to read, no model to run, no file to load):
    /// `rest.rs` `answer_now` answers those at once, and looks for them
    /// among `GET` and `HEAD` requests only. Every route is named, so a
    /// new one must be placed.
    pub(crate) fn waits_for_nothing(&self) -> bool {
        match self {
            Route::Root
            | Route::ModelList
            | Route::Live
            | Route::Ready
            | Route::ServerMetadata
            | Route::Metrics
            | Route::ModelMetadata(_)
            | Route::ModelReady(_)
            | Route::ModelConfig(_)
            | Route::ModelStats(_)
            | Route::TfStatus(_)
            | Route::TfMetadata(_) => true,
            Route::Infer(_)
            | Route::Generate(..)
            | Route::TfPredict(_)
            | Route::TfExamples(..)
            | Route::TfOtherVerb(_)
            | Route::ClipperPredict(_)
            | Route::ClipperUpdate(_)
            | Route::OpenAi(_)
            | Route::SharedMemory(_)
            | Route::RepositoryIndex
            | Route::RepositoryLoad(_)
            | Route::RepositoryUnload(_)
            | Route::Missing(_) => false,
        }
    }

    fn method(&self) -> Method {
        match self {
            Route::Infer(_)
            | Route::Generate(..)
            | Route::TfPredict(_)
            | Route::TfExamples(..)
            | Route::TfOtherVerb(_)
            | Route::ClipperPredict(_)
            | Route::ClipperUpdate(_)
            | Route::OpenAi(_)
            | Route::RepositoryIndex
            | Route::RepositoryLoad(_)
            | Route::RepositoryUnload(_) => Method::POST,
            Route::SharedMemory(route) if route.action != SharedMemoryAction::Status => {
                Method::POST
            }
            _ => Method::GET,
        }
    }
}

/// The most path segments any endpoint has
/// (`/v1/models/{name}/versions/{v}/metadata`), and one more to tell a
/// longer path.
const MAX_SEGMENTS: usize = 7;

/// The segments of `path` after its leading `/` (and without one trailing
/// `/`), without allocating: every request is routed, so this is on the
/// path of the smallest ones. `None` for a path longer than any endpoint's.
fn segments(path: &str) -> Option<([&str; MAX_SEGMENTS], usize)> {
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let mut segments = [""; MAX_SEGMENTS];
    let mut n = 0;
    for segment in trimmed.split('/').skip(1) {
        *segments.get_mut(n)? = segment;
        n += 1;
    }
    Some((segments, n))
}

/// The methods the endpoint at `path` takes, for a 405's `Allow` header.
pub(crate) fn allowed(path: &str) -> Option<&'static str> {
    let (segments, n) = segments(path)?;
    Some(match match_route(path, &segments[..n])?.method() {
        Method::POST => "POST",
        _ => "GET, HEAD",
    })
}

/// Finds the endpoint for `method` and `path`, or says why there is none.
pub(crate) fn route<'a>(method: &Method, path: &'a str) -> Result<Route<'a>, Error> {
    let found = segments(path).and_then(|(segments, n)| match_route(path, &segments[..n]));
    let Some(route) = found else {
        return Err(Error::new(
            ErrorKind::RouteNotFound,
            format!("no endpoint at {path}"),
        ));
    };
    // Endpoints not served answer their 501 whatever the method (Triton
    // takes GET and POST on the trace and log settings).
    if matches!(route, Route::Missing(_)) {
        return Ok(route);
    }
    // HEAD is GET without the body; hyper drops the body for us.
    let allowed = route.method();
    if *method == allowed || (*method == Method::HEAD && allowed == Method::GET) {
        Ok(route)
    } else {
        Err(Error::new(
            ErrorKind::MethodNotAllowed,
            format!("{path} takes {allowed}, not {method}"),
        ))
    }
}

fn match_route<'a>(path: &'a str, segments: &[&'a str]) -> Option<Route<'a>> {
    match segments {
        [] => Some(Route::Root),
        ["v1", "models"] => Some(Route::ModelList),
        ["v2"] => Some(Route::ServerMetadata),
        ["v2", "health", "live"] => Some(Route::Live),
        ["v2", "health", "ready"] => Some(Route::Ready),
        // TF Serving's Prometheus path (its monitoring config's default).
        ["metrics"] | ["monitoring", "prometheus", "metrics"] => Some(Route::Metrics),
        ["v2", "models", "stats"] => Some(Route::ModelStats(Target::new("", None))),
        ["v2", "repository", "index"] => Some(Route::RepositoryIndex),
        ["v2", "repository", "models", name, "load"] => Some(Route::RepositoryLoad(name)),
        ["v2", "repository", "models", name, "unload"] => Some(Route::RepositoryUnload(name)),
        ["v2", "trace", "setting"] | ["v2", "models", _, "trace", "setting"] => {
            Some(Route::Missing(Missing::Trace))
        }
        ["v2", "logging"] => Some(Route::Missing(Missing::Logging)),
        ["v2", "models", name, rest @ ..] if !name.is_empty() => model_route(name, rest),
        ["v1", "models", rest @ ..] => tf_route(rest),
        ["v1", "embeddings"] => Some(Route::OpenAi(Endpoint::Embeddings)),
        ["v1", "chat", "completions"] => Some(Route::OpenAi(Endpoint::ChatCompletions)),
        ["v1", "completions"] => Some(Route::OpenAi(Endpoint::Completions)),
        ["v2", kind @ ("systemsharedmemory" | "cudasharedmemory"), rest @ ..] => {
            shared_memory_route(*kind == "cudasharedmemory", rest)
        }
        [app, "predict"] if is_clipper(path) => Some(Route::ClipperPredict(app)),
        [app, "update"] if is_clipper(path) => Some(Route::ClipperUpdate(app)),
        _ => None,
    }
}

/// Which of the streaming endpoints a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Streaming {
    /// Triton's `generate`: one answer.
    Generate,
    /// Triton's `generate_stream`: an event per response (MLServer's for
    /// MLServer's models).
    GenerateStream,
    /// MLServer's `infer_stream`: a V2 infer request, an event per
    /// response, each a V2 infer response, for any model.
    InferStream,
}

fn model_route<'a>(name: &'a str, rest: &[&'a str]) -> Option<Route<'a>> {
    let (version, rest) = match rest {
        ["versions", v, rest @ ..] if !v.is_empty() => (Some(*v), rest),
        _ => (None, rest),
    };
    let model = Target::new(name, version);
    match rest {
        [] => Some(Route::ModelMetadata(model)),
        ["ready"] => Some(Route::ModelReady(model)),
        ["infer"] => Some(Route::Infer(model)),
        ["generate"] => Some(Route::Generate(model, Streaming::Generate)),
        ["generate_stream"] => Some(Route::Generate(model, Streaming::GenerateStream)),
        ["infer_stream"] => Some(Route::Generate(model, Streaming::InferStream)),
        ["config"] => Some(Route::ModelConfig(model)),
        ["stats"] => Some(Route::ModelStats(model)),
        _ => None,
    }
}

fn shared_memory_route<'a>(cuda: bool, rest: &[&'a str]) -> Option<Route<'a>> {
    let (region, action) = match rest {
        ["region", name, action] if !name.is_empty() => (*name, *action),
        [action] => ("", *action),
        _ => return None,
    };
    let action = match action {
        "status" => SharedMemoryAction::Status,
        "register" if !region.is_empty() => SharedMemoryAction::Register,
        "unregister" => SharedMemoryAction::Unregister,
        _ => return None,
    };
    Some(Route::SharedMemory(SharedMemoryRoute {
        cuda,
        region,
        action,
    }))
}

/// Whether `path` is one of the OpenAI API's own (not `/v1/models`, which
/// KServe v1 and TF Serving share): its errors are OpenAI's.
pub(crate) fn is_openai(path: &str) -> bool {
    let Some((segments, n)) = segments(path) else {
        return false;
    };
    matches!(
        &segments[..n],
        ["v1", "embeddings"] | ["v1", "chat", "completions"] | ["v1", "completions"]
    )
}

/// Whether `path` is Clipper's `/{app}/predict` or `/{app}/update` (an
/// app may not be called `v1` or `v2`, whose paths belong to TF Serving
/// and V2).
pub(crate) fn is_clipper(path: &str) -> bool {
    let Some((segments, n)) = segments(path) else {
        return false;
    };
    matches!(&segments[..n], [app, "predict" | "update"] if !app.is_empty() && *app != "v1" && *app != "v2")
}

/// TF Serving's paths under `/v1/models/`; the verb rides on the last
/// segment, as in `titanic/versions/1:predict`. Labels are not configured:
/// a label stands for the latest served version.
fn tf_route<'a>(rest: &[&'a str]) -> Option<Route<'a>> {
    let (last, head) = rest.split_last()?;
    let (last, verb) = match last.rsplit_once(':') {
        Some((segment, verb)) => (segment, Some(verb)),
        None => (*last, None),
    };
    let mut segments = [""; MAX_SEGMENTS];
    segments[..head.len()].copy_from_slice(head);
    segments[head.len()] = last;
    let (model, tail) = match &segments[..=head.len()] {
        [name, "versions", v, tail @ ..] if !name.is_empty() && !v.is_empty() => {
            (Target::new(name, Some(v)), tail)
        }
        [name, "labels", l, tail @ ..] if !name.is_empty() && !l.is_empty() => (
            Target {
                label: Some(l),
                ..Target::new(name, None)
            },
            tail,
        ),
        [name, tail @ ..] if !name.is_empty() => (Target::new(name, None), tail),
        _ => return None,
    };
    match (tail, verb) {
        ([], None) => Some(Route::TfStatus(model)),
        (["metadata"], None) => Some(Route::TfMetadata(model)),
        ([], Some("predict")) => Some(Route::TfPredict(model)),
        ([], Some("classify")) => Some(Route::TfExamples(model, Verb::Classify)),
        ([], Some("regress")) => Some(Route::TfExamples(model, Verb::Regress)),
        ([], Some(other)) => Some(Route::TfOtherVerb(other)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(path: &str) -> Result<Route<'_>, Error> {
        route(&Method::GET, path)
    }

    /// `rest.rs` `answer_now` looks for them among `GET` and `HEAD`
    /// requests only.
    #[test]
    fn the_endpoints_that_wait_for_nothing_are_gets() {
        let paths = [
            "/",
            "/v1/models",
            "/v2",
            "/v2/health/live",
            "/v2/health/ready",
            "/metrics",
            "/v2/models/m",
            "/v2/models/m/ready",
            "/v2/models/m/config",
            "/v2/models/m/stats",
            "/v2/models/stats",
            "/v1/models/m",
            "/v1/models/m/metadata",
        ];
        for path in paths {
            let route = get(path).unwrap();
            assert!(route.waits_for_nothing(), "{path}");
            assert_eq!(route.method(), Method::GET, "{path}");
        }
        for (method, path) in [
            (Method::POST, "/v2/models/m/infer"),
            (Method::GET, "/v2/systemsharedmemory/status"),
            (Method::POST, "/v2/repository/index"),
        ] {
            assert!(!route(&method, path).unwrap().waits_for_nothing(), "{path}");
        }
    }

    #[test]
    fn every_endpoint_routes() {
        let m = |name, version| Target::new(name, version);
        assert_eq!(get("/").unwrap(), Route::Root);
        assert_eq!(get("/v1/models").unwrap(), Route::ModelList);
        assert_eq!(get("/v2").unwrap(), Route::ServerMetadata);
        assert_eq!(get("/v2/").unwrap(), Route::ServerMetadata);
        assert_eq!(get("/v2/health/live").unwrap(), Route::Live);
        assert_eq!(get("/metrics").unwrap(), Route::Metrics);
        assert_eq!(get("/v2/health/ready").unwrap(), Route::Ready);
        assert_eq!(
            get("/v2/models/t").unwrap(),
            Route::ModelMetadata(m("t", None))
        );
        assert_eq!(
            get("/v2/models/t/versions/1").unwrap(),
            Route::ModelMetadata(m("t", Some("1")))
        );
        assert_eq!(
            get("/v2/models/t/versions/2/ready").unwrap(),
            Route::ModelReady(m("t", Some("2")))
        );
        assert_eq!(
            route(&Method::POST, "/v2/models/t/infer").unwrap(),
            Route::Infer(m("t", None))
        );
        assert_eq!(
            route(&Method::POST, "/v2/models/t/versions/1/infer").unwrap(),
            Route::Infer(m("t", Some("1")))
        );
        assert_eq!(
            get("/v2/models/t/versions/1/config").unwrap(),
            Route::ModelConfig(m("t", Some("1")))
        );
        assert_eq!(
            get("/v2/models/stats").unwrap(),
            Route::ModelStats(m("", None))
        );
        assert_eq!(
            get("/v2/models/t/stats").unwrap(),
            Route::ModelStats(m("t", None))
        );
    }

    #[test]
    fn tf_serving_and_clipper_routes() {
        let m = |name, version| Target::new(name, version);
        let post = |path| route(&Method::POST, path).unwrap();
        assert_eq!(get("/v1/models/t").unwrap(), Route::TfStatus(m("t", None)));
        assert_eq!(
            get("/v1/models/t/versions/3").unwrap(),
            Route::TfStatus(m("t", Some("3")))
        );
        assert_eq!(
            get("/v1/models/t/metadata").unwrap(),
            Route::TfMetadata(m("t", None))
        );
        assert_eq!(
            get("/v1/models/t/versions/3/metadata").unwrap(),
            Route::TfMetadata(m("t", Some("3")))
        );
        assert_eq!(post("/v1/models/t:predict"), Route::TfPredict(m("t", None)));
        assert_eq!(
            post("/v1/models/t/versions/2:predict"),
            Route::TfPredict(m("t", Some("2")))
        );
        let labelled = |label| Target {
            label: Some(label),
            ..m("t", None)
        };
        assert_eq!(
            post("/v1/models/t/labels/stable:predict"),
            Route::TfPredict(labelled("stable"))
        );
        assert_eq!(
            post("/v1/models/t:classify"),
            Route::TfExamples(m("t", None), Verb::Classify)
        );
        assert_eq!(post("/app/predict"), Route::ClipperPredict("app"));
        assert_eq!(post("/app/predict/"), Route::ClipperPredict("app"));
        assert_eq!(post("/app/update"), Route::ClipperUpdate("app"));
        assert_eq!(
            post("/v1/chat/completions"),
            Route::OpenAi(Endpoint::ChatCompletions)
        );
        assert_eq!(post("/v1/embeddings"), Route::OpenAi(Endpoint::Embeddings));
        assert!(is_openai("/v1/completions") && !is_openai("/v1/models"));
        assert!(is_clipper("/app/update"));
        assert_eq!(
            route(&Method::GET, "/monitoring/prometheus/metrics").unwrap(),
            Route::Metrics
        );
        assert_eq!(
            get("/v1/models/t:predict").unwrap_err().kind(),
            ErrorKind::MethodNotAllowed
        );
        // A label serves status and metadata too, as TF Serving's do.
        assert_eq!(
            get("/v1/models/t/labels/x").unwrap(),
            Route::TfStatus(labelled("x"))
        );
        assert_eq!(
            get("/v1/models/t/labels/x/metadata").unwrap(),
            Route::TfMetadata(labelled("x"))
        );
        assert_eq!(
            get("/v1/models/t/labels/x/other").unwrap_err().kind(),
            ErrorKind::RouteNotFound
        );
    }

    #[test]
    fn endpoints_not_served_are_named() {
        let post = |path| route(&Method::POST, path).unwrap();
        assert_eq!(post("/v2/repository/index"), Route::RepositoryIndex);
        assert_eq!(
            post("/v2/repository/models/t/load"),
            Route::RepositoryLoad("t")
        );
        assert_eq!(
            get("/v2/trace/setting").unwrap(),
            Route::Missing(Missing::Trace)
        );
        assert_eq!(
            post("/v2/models/t/trace/setting"),
            Route::Missing(Missing::Trace)
        );
        assert_eq!(post("/v2/logging"), Route::Missing(Missing::Logging));
        assert_eq!(
            post("/v2/models/t/versions/1/generate_stream"),
            Route::Generate(Target::new("t", Some("1")), Streaming::GenerateStream)
        );
        assert_eq!(
            post("/v2/models/t/generate"),
            Route::Generate(Target::new("t", None), Streaming::Generate)
        );
        assert_eq!(
            post("/v2/models/t/infer_stream"),
            Route::Generate(Target::new("t", None), Streaming::InferStream)
        );
    }

    #[test]
    fn shared_memory_routes() {
        let shm = |cuda, region, action| {
            Route::SharedMemory(SharedMemoryRoute {
                cuda,
                region,
                action,
            })
        };
        let post = |path| route(&Method::POST, path).unwrap();
        assert_eq!(
            get("/v2/systemsharedmemory/status").unwrap(),
            shm(false, "", SharedMemoryAction::Status)
        );
        assert_eq!(
            get("/v2/cudasharedmemory/region/r/status").unwrap(),
            shm(true, "r", SharedMemoryAction::Status)
        );
        assert_eq!(
            post("/v2/systemsharedmemory/region/in0/register"),
            shm(false, "in0", SharedMemoryAction::Register)
        );
        assert_eq!(
            post("/v2/systemsharedmemory/unregister"),
            shm(false, "", SharedMemoryAction::Unregister)
        );
        assert!(route(&Method::POST, "/v2/systemsharedmemory/register").is_err());
        assert_eq!(
            get("/v2/systemsharedmemory/region/r/register")
                .unwrap_err()
                .kind(),
            ErrorKind::MethodNotAllowed
        );
    }

    #[test]
    fn wrong_paths_and_methods_say_so() {
        assert_eq!(
            get("/v2/models/t/explain").unwrap_err().kind(),
            ErrorKind::RouteNotFound
        );
        assert_eq!(
            get("/v2/models//infer").unwrap_err().kind(),
            ErrorKind::RouteNotFound
        );
        assert_eq!(get("//").unwrap_err().kind(), ErrorKind::RouteNotFound);
        let e = get("/v2/models/t/infer").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MethodNotAllowed);
        assert!(e.message().contains("takes POST"), "{e}");
    }
}
