//! `backend = "upstream"`: a model served by another server (Triton,
//! KServe, MLServer, another wirespeed) over the Open Inference Protocol's
//! gRPC API (or its REST API, for servers with no gRPC). wirespeed decodes each request once, in whatever protocol it
//! came, and forwards the tensors as `raw_input_contents`; the answer goes
//! back in the client's own format. The client side (connections,
//! balancing, health, the calls) is `wirespeed-upstream`.
//!
//! Loading never waits for the upstream: the model starts not ready, and a
//! task learns its metadata (`ModelMetadata`, then `ModelReady`) with
//! growing jittered waits until the upstream answers. Inputs and outputs
//! come from that metadata; those the config declares pin them (a name the
//! upstream lacks, or another datatype, keeps the model not ready, saying
//! so). Readiness later follows the replicas: while none is admitted, the
//! model is not ready and says why.
//!
//! ```toml
//! backend = "upstream"
//! url = "grpc://127.0.0.1:8001"         # or urls = [...], grpcs://, grpc+unix:///path, http://
//! model = "resnet"                      # its name there; the folder's name unless set
//! # version = "2"                       # asked for there; the upstream's default unless set
//! # ca_file = "ca.pem"                  # for grpcs://; the system's roots unless set
//! # headers = { authorization = "Bearer ..." }
//! ```
//!
//! A URL with a path (`http://host:8000/v1`), or `api = "openai"`, is an
//! OpenAI-compatible server instead (`openai.rs`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::http::{HeaderMap, HeaderName, HeaderValue};
use crate::{Address, ChannelOptions, Upstream, UpstreamOptions, V2Client};
use serde::Deserialize;
use wirespeed_core::{
    Binding, DataType, Execution, InferCall, InferFuture, Model, ModelMetadata, TensorSpec,
};
use wirespeed_proto::inference::model_metadata_response::TensorMetadata;

use wirespeed_backend::{Backend, ModelSource};

mod openai;

/// `backend = "upstream"`.
pub struct UpstreamBackend;

impl Backend for UpstreamBackend {
    fn name(&self) -> &'static str {
        "upstream"
    }

    fn load(&self, source: &ModelSource<'_>) -> Result<Arc<dyn Model>, String> {
        let keys: UpstreamKeys = source.keys()?;
        let config = source.config();
        let remote = keys
            .model
            .clone()
            .unwrap_or_else(|| source.name().to_owned());
        let version = if config.version_given {
            config.version.clone()
        } else {
            String::new()
        };
        let (upstream, openai) = keys.upstream(source)?;
        if openai {
            if !config.inputs.is_empty() || !config.outputs.is_empty() {
                return Err(
                    "a model on an OpenAI upstream declares no [[inputs]] or [[outputs]]: it \
                     takes OpenAI's requests (or text_input) and answers them as the upstream does"
                        .to_owned(),
                );
            }
            let model =
                openai::OpenAiModel::start(source.name(), &config.version, remote, upstream)?;
            return Ok(model);
        }
        let pinned = Pinned {
            inputs: wirespeed_backend::TensorConfig::specs(&config.inputs)?,
            outputs: wirespeed_backend::TensorConfig::specs(&config.outputs)?,
        };
        let model = UpstreamModel::start(
            source.name(),
            &config.version,
            remote,
            version,
            pinned,
            upstream,
        )?;
        Ok(model)
    }
}

/// The upstream backend's own keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpstreamKeys {
    /// The API the upstream speaks: `v2` (the Open Inference Protocol, the
    /// default) or `openai` (the default for a URL with a path).
    #[serde(default)]
    api: Option<String>,
    /// The upstream's URL.
    #[serde(default)]
    url: Option<String>,
    /// Several replicas' URLs.
    #[serde(default)]
    urls: Vec<String>,
    /// The model's name on the upstream.
    #[serde(default)]
    model: Option<String>,
    /// The CA certificates of a TLS upstream, beside `config.toml`.
    #[serde(default)]
    ca_file: Option<PathBuf>,
    /// Headers sent with every call.
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    /// Connections each I/O thread keeps to each replica.
    #[serde(default)]
    connections: Option<usize>,
    /// Failures in a row that eject a replica.
    #[serde(default)]
    eject_after: Option<u32>,
    /// Retries of a call that reached nothing.
    #[serde(default)]
    retries: Option<u32>,
    /// Milliseconds to open a connection.
    #[serde(default)]
    connect_timeout_ms: Option<u64>,
    /// The largest answer accepted, in bytes.
    #[serde(default)]
    max_message_bytes: Option<usize>,
}

impl UpstreamKeys {
    /// The URLs, parsed.
    fn addresses(&self) -> Result<Vec<Address>, String> {
        let mut urls: Vec<&String> = self.url.iter().collect();
        urls.extend(&self.urls);
        if urls.is_empty() {
            return Err(
                "an upstream model needs url = \"grpc://host:port\" (or urls = [...]; \
                 http://host:port/v1 for an OpenAI-compatible server)"
                    .to_owned(),
            );
        }
        urls.iter().map(|u| u.parse::<Address>()).collect()
    }

    /// Whether the upstream at `addresses` speaks OpenAI's API rather than
    /// the V2 protocol: `api = "openai"`, or URLs with a path.
    fn openai(&self, addresses: &[Address]) -> Result<bool, String> {
        let with_path = addresses.iter().any(|a| !a.path.is_empty());
        match self.api.as_deref() {
            Some("openai") => Ok(true),
            None => Ok(with_path),
            Some("v2") if with_path => Err(
                "a V2 upstream's URL is scheme://host:port, with no path; a path is an OpenAI \
                 API's base (api = \"openai\")"
                    .to_owned(),
            ),
            Some("v2") => Ok(false),
            Some(other) => Err(format!("api = \"{other}\"; it is \"v2\" or \"openai\"")),
        }
    }

    /// The upstream these keys describe, and whether it speaks OpenAI's
    /// API; files are the model's (relative to its folder).
    pub(crate) fn upstream(
        &self,
        source: &ModelSource<'_>,
    ) -> Result<(Arc<Upstream>, bool), String> {
        let mut addresses = self.addresses()?;
        let openai = self.openai(&addresses)?;
        if openai {
            for address in &mut addresses {
                if address.protocol != crate::Protocol::Http {
                    return Err(format!(
                        "'{address}' is a gRPC URL; an OpenAI API is reached over http:// or \
                         https:// (http://host:port/v1)"
                    ));
                }
                if address.path.is_empty() {
                    address.path = "/v1".to_owned();
                }
            }
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let header = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("'{name}' in headers is not a header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header '{name}' is not a header value"))?;
            headers.insert(header, value);
        }
        let defaults = UpstreamOptions::default();
        let options = UpstreamOptions {
            channel: ChannelOptions {
                connect_timeout: self
                    .connect_timeout_ms
                    .map_or(defaults.channel.connect_timeout, Duration::from_millis),
                connections: self
                    .connections
                    .unwrap_or(defaults.channel.connections)
                    .max(1),
                ..defaults.channel
            },
            eject_after: self.eject_after.unwrap_or(defaults.eject_after).max(1),
            retries: self.retries.unwrap_or(defaults.retries),
            max_message_bytes: self.max_message_bytes.unwrap_or(defaults.max_message_bytes),
            headers,
            ca_file: self
                .ca_file
                .as_ref()
                .map(|f| source.file("ca_file", &f.to_string_lossy()))
                .transpose()?,
            probe: if openai {
                crate::Probe::OpenAiModels
            } else {
                defaults.probe
            },
        };
        Ok((Upstream::new(addresses, options)?, openai))
    }
}

/// The inputs and outputs the config declares.
struct Pinned {
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
}

/// A model served by an upstream.
pub struct UpstreamModel {
    client: V2Client,
    /// Its name and version on the upstream.
    remote: String,
    remote_version: String,
    pinned: Pinned,
    /// Learned from the upstream, once.
    learned: OnceLock<ModelMetadata>,
    /// What the model says before that: its name, version and the pinned
    /// tensors.
    placeholder: ModelMetadata,
    /// Why it is not ready yet.
    waiting: Mutex<String>,
}

impl UpstreamModel {
    /// The upstream's model `name`, served under the same name as version
    /// "1", its tensors from its metadata: a model of whole-server mode
    /// (`wirespeed serve --upstream`). Must run inside the server's runtime.
    pub fn front(name: &str, upstream: Arc<Upstream>) -> Result<Arc<dyn Model>, String> {
        let pinned = Pinned {
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        let model =
            UpstreamModel::start(name, "1", name.to_owned(), String::new(), pinned, upstream)?;
        Ok(model)
    }

    /// The model `name` (served as `version`), which is `remote` in
    /// `remote_version` on `upstream`; starts learning its metadata.
    fn start(
        name: &str,
        version: &str,
        remote: String,
        remote_version: String,
        pinned: Pinned,
        upstream: Arc<Upstream>,
    ) -> Result<Arc<UpstreamModel>, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "an upstream model is loaded inside the server's runtime".to_owned())?;
        let placeholder = ModelMetadata {
            name: name.to_owned(),
            versions: vec![version.to_owned()],
            platform: "upstream".to_owned(),
            inputs: pinned.inputs.clone(),
            outputs: pinned.outputs.clone(),
        };
        let model = Arc::new(UpstreamModel {
            waiting: Mutex::new(format!(
                "waiting for model '{remote}' on upstream {}",
                upstream.describe()
            )),
            client: V2Client::new(upstream),
            remote,
            remote_version,
            pinned,
            learned: OnceLock::new(),
            placeholder,
        });
        runtime.spawn(learn(Arc::downgrade(&model)));
        Ok(model)
    }

    fn upstream(&self) -> &Upstream {
        self.client.upstream()
    }

    /// Asks the upstream for the model's metadata and readiness, and makes
    /// ours from it and the pinned tensors.
    async fn fetch(&self) -> Result<ModelMetadata, String> {
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        let there = self
            .client
            .model_metadata(&self.remote, &self.remote_version, deadline)
            .await
            .map_err(|e| e.to_error().message().to_owned())?;
        let inputs = merge("input", &self.pinned.inputs, &there.inputs, &self.remote)?;
        let outputs = merge("output", &self.pinned.outputs, &there.outputs, &self.remote)?;
        let ready = self
            .client
            .model_ready(&self.remote, &self.remote_version, deadline)
            .await
            .map_err(|e| e.to_error().message().to_owned())?;
        if !ready {
            return Err(format!(
                "upstream {} says model '{}' is not ready",
                self.upstream().describe(),
                self.remote
            ));
        }
        Ok(ModelMetadata {
            platform: if there.platform.is_empty() {
                "upstream".to_owned()
            } else {
                there.platform
            },
            inputs,
            outputs,
            ..self.placeholder.clone()
        })
    }
}

/// Our inputs (or outputs) from the upstream's `there` and the config's
/// `pinned`: the pinned ones where given, each of which the upstream must
/// have (when it lists any) with the same datatype and a shape that fits.
fn merge(
    what: &str,
    pinned: &[TensorSpec],
    there: &[TensorMetadata],
    remote: &str,
) -> Result<Vec<TensorSpec>, String> {
    let mut theirs = Vec::with_capacity(there.len());
    for t in there {
        let datatype: DataType = t.datatype.parse().map_err(|e| {
            format!(
                "the upstream's metadata of model '{remote}': {what} '{}': {e}",
                t.name
            )
        })?;
        theirs.push(TensorSpec {
            optional: false,
            name: t.name.clone(),
            datatype,
            shape: t.shape.clone(),
        });
    }
    if pinned.is_empty() {
        // Neither side declares any (KServe's custom models, MLServer's
        // runtimes without settings): none, and the model binds openly,
        // each request's tensors forwarded as they come.
        return Ok(theirs);
    }
    for spec in pinned {
        if theirs.is_empty() {
            break;
        }
        let Some(other) = theirs.iter().find(|t| t.name == spec.name) else {
            let names: Vec<&str> = theirs.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "config.toml declares {what} '{}', which model '{remote}' on the upstream does not have (it has {})",
                spec.name,
                names.join(", ")
            ));
        };
        let fits = other.shape.len() == spec.shape.len()
            && other
                .shape
                .iter()
                .zip(&spec.shape)
                .all(|(&theirs, &ours)| theirs < 0 || theirs == ours);
        if other.datatype != spec.datatype || !fits {
            return Err(format!(
                "config.toml declares {what} '{}' as {} {}, but the upstream's model '{remote}' has {} {}",
                spec.name,
                spec.datatype,
                spec.shape_display(),
                other.datatype,
                other.shape_display()
            ));
        }
    }
    Ok(pinned.to_vec())
}

/// A model on an upstream that must learn something from it (its
/// metadata, that it serves the model) before it is ready.
trait Learner: Send + Sync + 'static {
    /// The model's name, for the log.
    fn name(&self) -> &str;
    /// Why it is not ready yet.
    fn waiting(&self) -> &Mutex<String>;
    /// One try: `Ok` once learned (and kept).
    fn attempt(&self) -> impl std::future::Future<Output = Result<(), String>> + Send;
}

/// Tries `model`'s [`Learner::attempt`] until it succeeds, waiting longer
/// after each failure (100 ms, doubling to 5 s, jittered), or until the
/// model is dropped.
async fn learn<M: Learner>(model: Weak<M>) {
    let mut wait = Duration::from_millis(100);
    let mut failures = 0u32;
    loop {
        let Some(m) = model.upgrade() else { return };
        let Err(why) = m.attempt().await else { return };
        if failures == 0 {
            tracing::warn!(model = %m.name(), reason = %why, "upstream model not ready yet; retrying with backoff");
        } else {
            tracing::debug!(model = %m.name(), reason = %why, "upstream model still not ready");
        }
        failures += 1;
        if let Ok(mut waiting) = m.waiting().lock() {
            *waiting = why;
        }
        drop(m);
        tokio::time::sleep(wait.mul_f64(0.5 + jitter_fraction() / 2.0)).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

/// A model on `upstream` is ready once it has `learned`, and while a
/// replica is admitted; else why not.
fn readiness(learned: bool, waiting: &Mutex<String>, upstream: &Upstream) -> Result<(), String> {
    if !learned {
        return Err(waiting.lock().map(|w| w.clone()).unwrap_or_default());
    }
    upstream.status().map_err(|why| {
        format!(
            "no replica of upstream {} answers: {why}",
            upstream.describe()
        )
    })
}

fn jitter_fraction() -> f64 {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    (random % 1024) as f64 / 1024.0
}

impl Learner for UpstreamModel {
    fn name(&self) -> &str {
        &self.placeholder.name
    }

    fn waiting(&self) -> &Mutex<String> {
        &self.waiting
    }

    /// Learns the model's metadata from the upstream.
    async fn attempt(&self) -> Result<(), String> {
        let metadata = self.fetch().await?;
        tracing::info!(
            model = %metadata.name,
            upstream = %self.upstream().describe(),
            remote = %self.remote,
            inputs = metadata.inputs.len(),
            outputs = metadata.outputs.len(),
            "upstream model ready"
        );
        let _ = self.learned.set(metadata);
        Ok(())
    }
}

impl Model for UpstreamModel {
    fn metadata(&self) -> &ModelMetadata {
        self.learned.get().unwrap_or(&self.placeholder)
    }

    fn ready(&self) -> Result<(), String> {
        readiness(self.learned.get().is_some(), &self.waiting, self.upstream())
    }

    fn execution(&self, _: usize) -> Execution {
        Execution::Async
    }

    fn default_concurrency(&self) -> Option<usize> {
        Some(1024)
    }

    /// A model whose inputs neither the upstream nor its config declares
    /// takes a request's tensors as they come, and answers what the
    /// upstream answers: the upstream checks them.
    fn binding(&self) -> Binding {
        match self.learned.get() {
            Some(learned) if learned.inputs.is_empty() => Binding::Open,
            _ => Binding::Declared,
        }
    }

    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        Box::pin(async move {
            let metadata = self.metadata();
            let outputs: Vec<&TensorSpec> =
                call.outputs.iter().map(|&i| &metadata.outputs[i]).collect();
            self.client
                .infer(crate::InferCall {
                    model: &self.remote,
                    version: &self.remote_version,
                    inputs: call.inputs,
                    outputs,
                    parameters: &call.parameters,
                    deadline: call.deadline,
                    trace: call.trace.as_ref(),
                })
                .await
                .map_err(|e| e.to_error())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, datatype: &str, shape: Vec<i64>) -> TensorMetadata {
        TensorMetadata {
            name: name.into(),
            datatype: datatype.into(),
            shape,
        }
    }

    fn spec(name: &str, datatype: DataType, shape: Vec<i64>) -> TensorSpec {
        TensorSpec {
            optional: false,
            name: name.into(),
            datatype,
            shape,
        }
    }

    #[test]
    fn pinned_tensors_must_agree_with_the_upstream() {
        let there = [meta("x", "FP32", vec![-1, -1])];
        let got = merge("input", &[], &there, "m").unwrap();
        assert_eq!(got, vec![spec("x", DataType::Fp32, vec![-1, -1])]);
        let narrower = [spec("x", DataType::Fp32, vec![-1, 8])];
        assert_eq!(merge("input", &narrower, &there, "m").unwrap(), narrower);
        let e = merge(
            "input",
            &[spec("x", DataType::Fp64, vec![-1, 8])],
            &there,
            "m",
        )
        .unwrap_err();
        assert!(e.contains("FP64") && e.contains("has FP32"), "{e}");
        let e = merge("input", &[spec("y", DataType::Fp32, vec![1])], &there, "m").unwrap_err();
        assert!(e.contains("does not have (it has x)"), "{e}");
        // Declared by neither side: none (the model binds openly).
        assert_eq!(merge("output", &[], &[], "m").unwrap(), vec![]);
        let pinned = [spec("y", DataType::Int64, vec![-1])];
        assert_eq!(merge("output", &pinned, &[], "m").unwrap(), pinned);
    }
}
