//! Triton's generate extension: `POST /v2/models/{m}[/versions/{v}]/generate`
//! and `.../generate_stream`, the text-in, text-out endpoints LLM clients
//! use, for any model.
//!
//! The request is a JSON object: each key that names one of the model's
//! inputs is that input (a string, number or boolean, or nested arrays of
//! them), shaped by its nesting with leading dimensions of 1 added to the
//! input's rank (`"text_input": "hi"` for a `[-1, 1]` BYTES input is
//! `[1, 1]`); `id` is the request's id; `parameters` (an object) and any
//! other key with a plain value are request parameters, as Triton passes
//! them. The request is rewritten as a V2 JSON request and decoded by the
//! same decoder as `/infer`, so its types, limits and error messages are
//! `/infer`'s. The answer is one JSON object: `id` (when given),
//! `model_name`, `model_version`, and each output by name, a single
//! element as a plain value (`"text_output": "..."`), more as an array.
//! `generate_stream` sends the same object as a server-sent event
//! (`data: {...}`, `text/event-stream`), one per response of a decoupled
//! model, as it sends them (an error after the first as
//! `data: {"error": ...}`); an error before inference is a JSON
//! `{"error": ...}` with its status, as for `/generate`. `/generate` on a
//! decoupled model answers its one response, or Triton's error when it
//! sends none or several.
//!
//! MLServer's streams speak V2 infer JSON instead: `.../infer_stream` (any
//! model) and `.../generate_stream` on MLServer's models take a V2 infer
//! request (read by the same decoder as `/infer`, with MLServer's
//! conventions) and send each response as a V2 infer response in its
//! event, as MLServer's `predict_stream` answers are sent.

use std::sync::Arc;

use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use serde_json::{Map, Value};
use wirespeed_core::{Error, InferRequest, InferResponse, TensorData};
use wirespeed_http::RequestBody;
use wirespeed_json::RequestDecoder;

use crate::protocols::http::body::{decode_error, RestRequest};
use crate::protocols::http::events;
use crate::protocols::http::response::{self, Body};
use crate::protocols::router::Streaming;
use crate::protocols::Front;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{self, Codec, RequestContext, Target};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::stream::ResponseStream;
use wirespeed_engine::timing::{timed, Stages};

/// Answers one request to a streaming endpoint.
pub(crate) async fn generate(
    front: &Front,
    context: RequestContext,
    target: Target<'_>,
    request: Request<RequestBody>,
    streaming: Streaming,
) -> Response<Body> {
    let codec = Generate {
        request: RestRequest::new(front, request),
        stream: streaming != Streaming::Generate,
        v2: streaming == Streaming::InferStream,
    };
    front.engine.infer(context, target, codec).await
}

/// The generate codec of one request.
struct Generate<'a> {
    request: RestRequest<'a>,
    /// `generate_stream`: the answer is a server-sent event.
    stream: bool,
    /// The request and each response are V2 infer JSON (MLServer's
    /// streams), not generate's flat objects.
    v2: bool,
}

impl Codec for Generate<'_> {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::V2Rest;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        let body = self.request.read_json(stages).await?;
        let mut options = self.request.front.engine.decode_options.clone();
        // MLServer's generate_stream takes what its infer takes.
        self.v2 |= model.dialect == wirespeed_core::Dialect::Mlserver && self.stream;
        if self.v2 {
            options.bytes_length_dimension = model.dialect == wirespeed_core::Dialect::Mlserver;
            return timed(&mut stages.decode, || {
                let mut decoder = RequestDecoder::new(options);
                decoder.feed(&body).map_err(decode_error)?;
                decoder.finish().map_err(decode_error)
            });
        }
        timed(&mut stages.decode, || {
            let Pairs(object) = serde_json::from_slice(&body).map_err(|e| {
                Error::malformed(format!("the generate request is not a JSON object: {e}"))
            })?;
            let v2 = as_infer_request(object, model)?;
            let mut decoder = RequestDecoder::new(options);
            decoder.feed(&v2).map_err(decode_error)?;
            decoder.finish().map_err(decode_error)
        })
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        let mut out = Vec::with_capacity(128);
        if self.v2 {
            infer_object(&response, &mut out)?;
        } else {
            object(&response, &mut out)?;
        }
        if !self.stream {
            return Ok(response::json(out));
        }
        let mut answer = response::json(events::event(|event| event.extend_from_slice(&out)));
        answer.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        Ok(answer)
    }

    /// `generate_stream` on a decoupled model: an event per response, an
    /// error as `{"error": ...}` in its event, as Triton's.
    async fn encode_stream(&mut self, stream: ResponseStream) -> Result<Response<Body>, Error> {
        if !self.stream {
            // Triton's words, for clients that look for them.
            let response = stream
                .only_or(
                    "generate expects model to produce exactly 1 response, use generate stream \
                     for model that generates various number of responses",
                )
                .await?;
            return self.encode(response);
        }
        let v2 = self.v2;
        Ok(events::answer(
            stream,
            Box::new(move |item, out| {
                let written = item.response.and_then(|response| match v2 {
                    true => infer_object(&response, out),
                    false => object(&response, out),
                });
                if let Err(error) = written {
                    let message = pipeline::public_message(&error, 0);
                    out.extend_from_slice(b"{\"error\":");
                    wirespeed_json::encode_string(&message, out);
                    out.push(b'}');
                }
            }),
        ))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    async fn refuse(&mut self, error: Error) -> Error {
        self.request.refuse(error).await
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        response::error_with(error, message)
    }
}

/// Writes a response as generate's JSON object (`id`, `model_name`,
/// `model_version`, and each output by name) after what `out` holds,
/// unless an output is not text a JSON string can carry.
fn object(response: &InferResponse, out: &mut Vec<u8>) -> Result<(), Error> {
    all_text(response)?;
    write_object(response, out);
    Ok(())
}

/// Writes a response as a V2 infer response (MLServer's stream events)
/// after what `out` holds, unless an output is not text a JSON string can
/// carry.
fn infer_object(response: &InferResponse, out: &mut Vec<u8>) -> Result<(), Error> {
    all_text(response)?;
    wirespeed_json::encode_infer_response(response, out);
    Ok(())
}

/// Refuses an answer with an output whose bytes are not UTF-8 text, which
/// a JSON string cannot carry.
fn all_text(response: &InferResponse) -> Result<(), Error> {
    for output in &response.outputs {
        if let Some(at) = wirespeed_json::non_utf8_element(&output.data) {
            return Err(Error::model_failed(format!(
                "output '{}' element {at} is not UTF-8 text, which a JSON answer cannot \
                 carry; ask /infer with binary outputs",
                output.name
            )));
        }
    }
    Ok(())
}

fn write_object(response: &InferResponse, out: &mut Vec<u8>) {
    out.push(b'{');
    if let Some(id) = &response.id {
        out.extend_from_slice(b"\"id\":");
        wirespeed_json::encode_string(id, out);
        out.push(b',');
    }
    out.extend_from_slice(b"\"model_name\":");
    wirespeed_json::encode_string(&response.model_name, out);
    if !response.model_version.is_empty() {
        out.extend_from_slice(b",\"model_version\":");
        wirespeed_json::encode_string(&response.model_version, out);
    }
    for output in &response.outputs {
        out.push(b',');
        wirespeed_json::encode_string(&output.name, out);
        out.push(b':');
        output_value(&output.data, out);
    }
    out.push(b'}');
}

/// An output's JSON value: one element plain, more in a flat array.
fn output_value(data: &TensorData, out: &mut Vec<u8>) {
    if data.len() == 1 {
        wirespeed_json::encode_tensor_data(data, out);
    } else {
        out.push(b'[');
        wirespeed_json::encode_tensor_data(data, out);
        out.push(b']');
    }
}

/// A JSON object's members in order, a key given twice kept twice (a map
/// would keep the last): Triton refuses a generate request that names an
/// input twice.
struct Pairs(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Pairs, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Pairs, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(Pairs(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// The V2 JSON infer request a generate request says, for `model`.
fn as_infer_request(object: Vec<(String, Value)>, model: &ServedModel) -> Result<Vec<u8>, Error> {
    let metadata = model.metadata();
    let mut inputs = Vec::new();
    let mut parameters = Map::new();
    let mut id = None;
    // One pass with a set: a body of a million keys costs a million
    // look-ups, not a million squared comparisons.
    let mut seen = std::collections::HashSet::with_capacity(object.len());
    for (key, _) in &object {
        if !seen.insert(key.as_str()) {
            let what = if metadata.inputs.iter().any(|s| s.name == *key) {
                "input"
            } else {
                "parameter"
            };
            return Err(Error::invalid_input(format!(
                "{what} '{key}' already exists in request"
            )));
        }
    }
    for (key, value) in object {
        if let Some(spec) = metadata.inputs.iter().find(|s| s.name == key) {
            let mut shape = nesting(&value);
            if shape.len() > spec.shape.len() {
                return Err(Error::invalid_input(format!(
                    "'{key}' is nested {} deep, but input '{key}' has {} dimensions",
                    shape.len(),
                    spec.shape.len()
                )));
            }
            while shape.len() < spec.shape.len() {
                shape.insert(0, 1);
            }
            let data = match value {
                Value::Array(_) => value,
                scalar => Value::Array(vec![scalar]),
            };
            inputs.push(serde_json::json!({
                "name": key,
                "datatype": spec.datatype.as_str(),
                "shape": shape,
                "data": data,
            }));
            continue;
        }
        match (key.as_str(), value) {
            // An empty id is no id, as Triton answers it.
            ("id", Value::String(s)) => id = Some(s).filter(|s| !s.is_empty()),
            ("id", other) => {
                return Err(Error::invalid_input(format!(
                    "'id' must be a string, not {other}"
                )))
            }
            ("parameters", Value::Object(given)) => parameters.extend(given),
            ("parameters", other) => {
                return Err(Error::invalid_input(format!(
                    "Expected JSON object for keyword: 'parameters' (got {other})"
                )))
            }
            // Not an input: a parameter, as Triton passes it.
            (_, value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
                parameters.insert(key, value);
            }
            (_, _) => {
                let names: Vec<String> = metadata
                    .inputs
                    .iter()
                    .map(|s| format!("'{}'", s.name))
                    .collect();
                return Err(Error::invalid_input(format!(
                    "parameter '{key}' has invalid type. It should be either 'int', 'bool', or \
                     'string'. ('{key}' is not an input of model '{}', which takes {})",
                    metadata.name,
                    names.join(", ")
                )));
            }
        }
    }
    let mut request = Map::new();
    if let Some(id) = id {
        request.insert("id".into(), Value::String(id));
    }
    if !parameters.is_empty() {
        request.insert("parameters".into(), Value::Object(parameters));
    }
    request.insert("inputs".into(), Value::Array(inputs));
    Ok(Value::Object(request).to_string().into_bytes())
}

/// The shape of a JSON value's nesting: `[]` for a plain value, the
/// lengths of the first elements down for arrays (the decoder checks the
/// rest against it).
fn nesting(value: &Value) -> Vec<usize> {
    let mut shape = Vec::new();
    let mut at = value;
    while let Value::Array(items) = at {
        shape.push(items.len());
        match items.first() {
            Some(first) => at = first,
            None => break,
        }
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_gives_the_shape() {
        assert_eq!(nesting(&serde_json::json!("a")), Vec::<usize>::new());
        assert_eq!(nesting(&serde_json::json!([[1, 2, 3], [4, 5, 6]])), [2, 3]);
        assert_eq!(nesting(&serde_json::json!([])), [0]);
    }

    #[test]
    fn an_output_of_one_element_is_a_plain_value_and_more_an_array() {
        let mut out = Vec::new();
        output_value(&TensorData::Bytes(vec![b"hi".to_vec()]), &mut out);
        assert_eq!(out, b"\"hi\"");
        out.clear();
        output_value(&TensorData::Int32(vec![1, 2, 3]), &mut out);
        assert_eq!(out, b"[1,2,3]");
        out.clear();
        output_value(&TensorData::Fp32(vec![]), &mut out);
        assert_eq!(out, b"[]");
    }
}
