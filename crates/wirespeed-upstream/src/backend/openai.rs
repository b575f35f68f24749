//! `backend = "upstream"` with an OpenAI URL: a model served by another
//! server's OpenAI-compatible API (vLLM, llama.cpp's server, TGI, OpenAI
//! itself, another wirespeed).
//!
//! ```toml
//! backend = "upstream"
//! url = "http://127.0.0.1:8000/v1"     # the SDKs' base_url; or urls = [...]; api = "openai" says it without a path
//! model = "meta-llama/Llama-3.1-8B-Instruct"   # its name there; the folder's name unless set
//! # headers = { authorization = "Bearer sk-..." }
//! ```
//!
//! The OpenAI front end forwards its requests here as their clients wrote
//! them ([`TextModel::forwards`]): `model` renamed to the upstream's, every
//! other field left for the upstream to check (vLLM's own sampling fields
//! included), and the answer back with `model` renamed to ours, a stream's
//! events each sent on as it arrives. Through the V2 APIs the model is a
//! generator of Triton's LLM shape: `text_input` in, `text_output` (and
//! `finish_reason`) out as a stream of pieces, asked of the upstream's
//! `/completions` with the request's sampling parameters.
//!
//! Loading never waits for the upstream: the model is not ready until its
//! `GET /models` answers (and lists the model, when it lists any), and
//! later while no replica answers.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::{rename_model, OpenAiAnswer, OpenAiClient, Upstream};
use serde_json::{json, Map, Value};
use wirespeed_core::{
    DataType, Error, ErrorKind, Execution, InferCall, InferFuture, Model, ModelMetadata,
    ParameterValue, ResponseSender, Tensor, TensorData, TensorSpec, TextModel, JSON_BODY,
    JSON_ENDPOINT,
};

/// The sampling parameters a V2 request's parameters pass to the
/// upstream's `/completions`.
const SAMPLING: &[&str] = &[
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "frequency_penalty",
    "presence_penalty",
];

/// A model on an upstream's OpenAI API.
pub(crate) struct OpenAiModel {
    client: OpenAiClient,
    /// Its name there.
    remote: String,
    metadata: ModelMetadata,
    /// Set once the upstream has answered `GET /models`.
    seen: OnceLock<()>,
    /// Why it is not ready yet.
    waiting: Mutex<String>,
}

impl OpenAiModel {
    /// The model `name` (served as `version`), which is `remote` on
    /// `upstream`; starts asking the upstream for its model list.
    pub(crate) fn start(
        name: &str,
        version: &str,
        remote: String,
        upstream: Arc<Upstream>,
    ) -> Result<Arc<OpenAiModel>, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "an upstream model is loaded inside the server's runtime".to_owned())?;
        let bytes = |name: &str, optional: bool| TensorSpec {
            optional,
            name: name.to_owned(),
            datatype: DataType::Bytes,
            shape: vec![1],
        };
        let metadata = ModelMetadata {
            name: name.to_owned(),
            versions: vec![version.to_owned()],
            platform: "openai".to_owned(),
            inputs: vec![bytes("text_input", true), bytes(JSON_BODY, true)],
            outputs: vec![
                bytes("text_output", false),
                bytes("finish_reason", false),
                bytes(JSON_BODY, false),
            ],
        };
        let model = Arc::new(OpenAiModel {
            waiting: Mutex::new(format!(
                "waiting for upstream {} to list its models",
                upstream.describe()
            )),
            client: OpenAiClient::new(upstream),
            remote,
            metadata,
            seen: OnceLock::new(),
        });
        runtime.spawn(super::learn(Arc::downgrade(&model)));
        Ok(model)
    }

    fn upstream(&self) -> &Upstream {
        self.client.upstream()
    }

    /// Asks the upstream's model list whether it serves the model.
    async fn check(&self) -> Result<(), String> {
        let deadline = Some(Instant::now() + Duration::from_secs(10));
        let ids = self
            .client
            .models(deadline)
            .await
            .map_err(|e| e.to_error().message().to_owned())?;
        if !ids.is_empty() && !ids.contains(&self.remote) {
            return Err(format!(
                "upstream {} serves {}, not '{}' (set model = \"...\" to its name there)",
                self.upstream().describe(),
                ids.iter()
                    .map(|id| format!("'{id}'"))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.remote
            ));
        }
        Ok(())
    }

    /// Forwards an OpenAI request and sends its answer on: the whole
    /// answer as one response, a stream's events one response each.
    async fn forward(&self, call: InferCall, responses: ResponseSender) -> Result<(), Error> {
        let endpoint = call
            .parameters
            .iter()
            .find(|(k, _)| k == JSON_ENDPOINT)
            .and_then(|(_, v)| match v {
                ParameterValue::String(s) => Some(s.clone()),
                _ => None,
            })
            .ok_or_else(|| {
                Error::invalid_input(format!(
                    "an '{JSON_BODY}' comes with the '{JSON_ENDPOINT}' parameter: \
                     chat/completions, completions or embeddings"
                ))
            })?;
        if !matches!(
            endpoint.as_str(),
            "chat/completions" | "completions" | "embeddings"
        ) {
            return Err(Error::invalid_input(format!(
                "'{JSON_ENDPOINT}' is '{endpoint}'; it is chat/completions, completions or \
                 embeddings"
            )));
        }
        let request = only_bytes(&call.inputs, JSON_BODY)?;
        let body = rename_model(request, &self.remote)
            .map_err(|e| Error::invalid_input(format!("the request body is {e}")))?;
        let answer = self
            .client
            .post(&endpoint, body, call.trace.as_ref(), call.deadline)
            .await
            .map_err(|e| e.to_error())?;
        let ours = &self.metadata.name;
        let tensor = |data: Vec<u8>| Tensor {
            name: JSON_BODY.to_owned(),
            shape: vec![1],
            data: TensorData::Bytes(vec![data]),
            parameters: Vec::new(),
        };
        match answer {
            OpenAiAnswer::Whole(body) => {
                let renamed = rename_model(&body, ours).map_err(|e| {
                    Error::new(
                        ErrorKind::BadGateway,
                        format!(
                            "upstream {} answered {endpoint} with a body that is {e}",
                            self.upstream().describe()
                        ),
                    )
                })?;
                let _ = responses.send_last(Ok(vec![tensor(renamed)])).await;
            }
            OpenAiAnswer::Events(mut events) => {
                while let Some(event) = events.next().await {
                    let sent = match event {
                        Ok(data) => {
                            let renamed =
                                rename_model(&data, ours).unwrap_or_else(|_| data.to_vec());
                            responses.send(Ok(vec![tensor(renamed)])).await
                        }
                        Err(e) => {
                            let error = e.to_error();
                            let message = format!("the stream broke off: {}", error.message());
                            responses
                                .send_last(Err(Error::new(error.kind(), message)))
                                .await
                        }
                    };
                    // The client has gone: dropping the events closes the
                    // upstream's connection, which cancels its request.
                    if sent.is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// A V2 request: `text_input` as the prompt of the upstream's
    /// `/completions`, streamed, each piece sent on as `text_output`.
    async fn generate(&self, call: InferCall, responses: ResponseSender) -> Result<(), Error> {
        let prompt = std::str::from_utf8(only_bytes(&call.inputs, "text_input")?)
            .map_err(|_| Error::invalid_input("'text_input' is not UTF-8 text"))?;
        let mut body = Map::new();
        body.insert("model".into(), json!(self.remote));
        body.insert("prompt".into(), json!(prompt));
        body.insert("stream".into(), json!(true));
        for (key, value) in &call.parameters {
            if !SAMPLING.contains(&key.as_str()) {
                continue;
            }
            let value = match value {
                ParameterValue::Bool(b) => json!(b),
                ParameterValue::Int(i) => json!(i),
                ParameterValue::Float(x) => json!(x),
                // `stop` as a JSON list, as the OpenAI front end passes it.
                ParameterValue::String(s) => {
                    serde_json::from_str::<Value>(s).unwrap_or_else(|_| json!(s))
                }
            };
            body.insert(key.clone(), value);
        }
        let answer = self
            .client
            .post(
                "completions",
                Value::Object(body).to_string().into_bytes(),
                call.trace.as_ref(),
                call.deadline,
            )
            .await
            .map_err(|e| e.to_error())?;
        let wanted = |name: &str| {
            call.outputs
                .iter()
                .any(|&i| self.metadata.outputs[i].name == name)
        };
        let piece = |name: &str, text: &str| Tensor {
            name: name.to_owned(),
            shape: vec![1],
            data: TensorData::Bytes(vec![text.as_bytes().to_vec()]),
            parameters: Vec::new(),
        };
        // A piece's outputs; none for an event with neither text nor a
        // finish (a usage event, a role chunk).
        let pieces = |data: &[u8]| -> Option<Result<Vec<Tensor>, Error>> {
            let (text, finish) = match completion_piece(data) {
                Ok(piece) => piece,
                Err(e) => {
                    return Some(Err(Error::new(
                        ErrorKind::BadGateway,
                        format!(
                            "upstream {} answered /completions with {e}",
                            self.upstream().describe()
                        ),
                    )))
                }
            };
            if text.is_empty() && finish.is_none() {
                return None;
            }
            let mut outputs = Vec::with_capacity(2);
            if wanted("text_output") {
                outputs.push(piece("text_output", &text));
            }
            if let Some(finish) = finish.filter(|_| wanted("finish_reason")) {
                outputs.push(piece("finish_reason", &finish));
            }
            Some(Ok(outputs))
        };
        match answer {
            OpenAiAnswer::Whole(body) => {
                let piece = pieces(&body).unwrap_or_else(|| Ok(Vec::new()));
                let _ = responses.send_last(piece).await;
            }
            OpenAiAnswer::Events(mut events) => {
                while let Some(event) = events.next().await {
                    let sent = match event {
                        Ok(data) => match pieces(&data) {
                            Some(piece) => responses.send(piece).await,
                            None => Ok(()),
                        },
                        Err(e) => responses.send_last(Err(e.to_error())).await,
                    };
                    if sent.is_err() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A completion's (or a chunk's) first choice: its text and finish reason;
/// an `error` event as the error it carries.
fn completion_piece(data: &[u8]) -> Result<(String, Option<String>), String> {
    #[derive(serde::Deserialize)]
    struct Choice {
        #[serde(default)]
        text: String,
        #[serde(default)]
        finish_reason: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Chunk {
        #[serde(default)]
        choices: Vec<Choice>,
        #[serde(default)]
        error: Option<Value>,
    }
    let chunk: Chunk =
        serde_json::from_slice(data).map_err(|e| format!("an event that is not JSON: {e}"))?;
    if let Some(error) = chunk.error {
        return Err(format!(
            "an error: {}",
            crate::error_message(error.to_string().as_bytes())
        ));
    }
    Ok(chunk
        .choices
        .into_iter()
        .next()
        .map_or((String::new(), None), |c| (c.text, c.finish_reason)))
}

/// The one element of the BYTES input `name`.
fn only_bytes<'a>(inputs: &'a [Tensor], name: &str) -> Result<&'a [u8], Error> {
    let tensor = inputs
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| Error::invalid_input(format!("the request has no '{name}'")))?;
    match &tensor.data {
        TensorData::Bytes(items) if items.len() == 1 => Ok(&items[0]),
        TensorData::Bytes(items) => Err(Error::invalid_input(format!(
            "'{name}' holds {} elements; it is one text",
            items.len()
        ))),
        other => Err(Error::invalid_input(format!(
            "'{name}' is {}; it is BYTES",
            other.datatype()
        ))),
    }
}

impl super::Learner for OpenAiModel {
    fn name(&self) -> &str {
        &self.metadata.name
    }

    fn waiting(&self) -> &Mutex<String> {
        &self.waiting
    }

    /// Asks the upstream's model list whether it serves the model.
    async fn attempt(&self) -> Result<(), String> {
        self.check().await?;
        tracing::info!(
            model = %self.metadata.name,
            upstream = %self.upstream().describe(),
            remote = %self.remote,
            "upstream OpenAI model ready"
        );
        let _ = self.seen.set(());
        Ok(())
    }
}

impl TextModel for OpenAiModel {
    fn forwards(&self) -> bool {
        true
    }
}

impl Model for OpenAiModel {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn ready(&self) -> Result<(), String> {
        super::readiness(self.seen.get().is_some(), &self.waiting, self.upstream())
    }

    fn text(&self) -> Option<&dyn TextModel> {
        Some(self)
    }

    fn decoupled(&self) -> bool {
        true
    }

    fn execution(&self, _: usize) -> Execution {
        Execution::Async
    }

    fn default_concurrency(&self) -> Option<usize> {
        Some(1024)
    }

    fn infer_async(self: Arc<Self>, mut call: InferCall) -> InferFuture {
        Box::pin(async move {
            let responses = call.responses.take().ok_or_else(|| {
                Error::internal("an OpenAI upstream model answers with a stream of responses")
            })?;
            if call.inputs.iter().any(|t| t.name == JSON_BODY) {
                self.forward(call, responses).await?;
            } else if call.inputs.iter().any(|t| t.name == "text_input") {
                self.generate(call, responses).await?;
            } else {
                return Err(Error::invalid_input(format!(
                    "model '{}' takes 'text_input' (a prompt) or '{JSON_BODY}' (an OpenAI \
                     request's JSON)",
                    self.metadata.name
                )));
            }
            Ok(Vec::new())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_pieces_are_read_and_errors_named() {
        let (text, finish) = completion_piece(
            br#"{"id":"c","choices":[{"index":0,"text":" world","finish_reason":"length"}]}"#,
        )
        .unwrap();
        assert_eq!(
            (text.as_str(), finish.as_deref()),
            (" world", Some("length"))
        );
        let (text, finish) =
            completion_piece(br#"{"choices":[],"usage":{"prompt_tokens":3}}"#).unwrap();
        assert_eq!((text.as_str(), finish), ("", None));
        let e = completion_piece(br#"{"error":{"message":"the engine died"}}"#).unwrap_err();
        assert!(e.contains("the engine died"), "{e}");
        assert!(completion_piece(b"nope").is_err());
    }
}
