//! `POST /v1/embeddings`: texts in, one vector each out, from a model with
//! an embedder's text face (`[embedding]`, `wirespeed-text`'s
//! `embedding.rs`): its `text` input fed the texts, its `embedding`
//! output written as OpenAI's `data`, its `tokens` summed as `usage`.
//!
//! | field | state |
//! |---|---|
//! | `model` | the embedder's name |
//! | `input` | a string or a list of strings (token-id arrays are refused: send text) |
//! | `encoding_format` | `float` (the default) or `base64`, the vector's little-endian FP32 bytes |
//! | `dimensions` | the model's size, or one of the smaller sizes its config allows (the first values, scaled to unit length again) |
//! | `user` | accepted and ignored |

use std::sync::Arc;

use base64::Engine;
use hyper::Response;
use serde_json::{Map, Value};
use wirespeed_core::{Error, InferRequest, InferResponse, Tensor, TensorData};

use super::{error_with, known_keys, Refusal};
use crate::protocols::http::response::{self, Body};
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::Codec;
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::timing::Stages;

/// The fields besides `model`.
const KEYS: &[&str] = &["input", "encoding_format", "dimensions", "user"];

/// One embeddings request, as parsed.
struct Ask {
    texts: Vec<String>,
    base64: bool,
    dimensions: Option<usize>,
}

/// The codec of one `POST /v1/embeddings` to `model`, a model of ours,
/// from the request's fields, or the refusal of a field.
pub(super) fn codec(model: String, fields: &Map<String, Value>) -> Result<Embeddings, Refusal> {
    Ok(Embeddings {
        ask: Some(parse(fields)?),
        base64: false,
        dimensions: None,
        model,
    })
}

fn parse(object: &Map<String, Value>) -> Result<Ask, Refusal> {
    known_keys(object, KEYS).map_err(|e| (e, None))?;
    let bad_input = |what: &str| {
        (
            Error::invalid_input(format!("'input' {what}")),
            Some("input"),
        )
    };
    let texts = match object.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(bad_input("is an empty list; give at least one text"))
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(_) | Value::Array(_) => Err(bad_input(
                    "holds token ids; this server takes text, which the model's own tokenizer reads",
                )),
                _ => Err(bad_input("must be a string or a list of strings")),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(bad_input("must be a string or a list of strings")),
        None => return Err(bad_input("is required: the text to embed")),
    };
    let base64 = match object.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(other) => {
            return Err((
                Error::invalid_input(format!(
                    "'encoding_format' is {other}; it is 'float' or 'base64'"
                )),
                Some("encoding_format"),
            ))
        }
    };
    let dimensions = match object.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|d| d > 0) => {
            Some(n.as_u64().unwrap_or(0) as usize)
        }
        Some(other) => {
            return Err((
                Error::invalid_input(format!(
                    "'dimensions' is {other}; it is a whole number above 0"
                )),
                Some("dimensions"),
            ))
        }
    };
    Ok(Ask {
        texts,
        base64,
        dimensions,
    })
}

/// The embeddings codec of one request.
pub(super) struct Embeddings {
    /// Until it is decoded.
    ask: Option<Ask>,
    base64: bool,
    /// The size asked, when smaller than the model's.
    dimensions: Option<usize>,
    model: String,
}

impl Codec for Embeddings {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::OpenAi;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        _stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        let ask = self
            .ask
            .take()
            .ok_or_else(|| Error::internal("an embeddings request decoded twice"))?;
        let text = model.model.text().filter(|t| t.embeds()).ok_or_else(|| {
            Error::invalid_input(format!(
                "model '{}' is not an embedding model (its config has no [embedding])",
                self.model
            ))
        })?;
        let size = model
            .metadata()
            .outputs
            .first()
            .and_then(|o| o.shape.last().copied())
            .filter(|&s| s > 0)
            .map(|s| s as usize);
        if let Some(d) = ask.dimensions {
            if Some(d) != size {
                if !text.embedding_sizes().contains(&d) {
                    let allowed: Vec<String> = size
                        .into_iter()
                        .chain(text.embedding_sizes().iter().copied())
                        .map(|s| s.to_string())
                        .collect();
                    return Err(Error::invalid_input(format!(
                        "model '{}' does not take dimensions {d}; it answers in {}",
                        self.model,
                        allowed.join(", ")
                    )));
                }
                self.dimensions = Some(d);
            }
        }
        self.base64 = ask.base64;
        let rows = ask.texts.len();
        Ok(InferRequest {
            inputs: vec![Tensor {
                name: "text".into(),
                shape: vec![rows],
                data: TensorData::Bytes(ask.texts.into_iter().map(String::into_bytes).collect()),
                parameters: Vec::new(),
            }],
            ..InferRequest::default()
        })
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        let embedding = response
            .outputs
            .iter()
            .find(|t| t.name == "embedding")
            .ok_or_else(|| Error::model_failed("the embedder gave no embedding"))?;
        let TensorData::Fp32(values) = &embedding.data else {
            return Err(Error::model_failed("the embedder's embedding is not FP32"));
        };
        let (rows, size) = match embedding.shape.as_slice() {
            &[rows, size] => (rows, size),
            shape => {
                return Err(Error::model_failed(format!(
                    "the embedder answered shape {shape:?}, not [rows, size]"
                )))
            }
        };
        let tokens: i64 = response
            .outputs
            .iter()
            .find(|t| t.name == "tokens")
            .map_or(0, |t| match &t.data {
                TensorData::Int64(v) => v.iter().sum(),
                _ => 0,
            });
        let mut out = Vec::with_capacity(rows * size * 12 + 128);
        out.extend_from_slice(b"{\"object\":\"list\",\"data\":[");
        let mut shorter = Vec::new();
        for row in 0..rows {
            if row > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"object\":\"embedding\",\"index\":");
            out.extend_from_slice(itoa::Buffer::new().format(row).as_bytes());
            out.extend_from_slice(b",\"embedding\":");
            let full = &values[row * size..(row + 1) * size];
            let vector: &[f32] = match self.dimensions {
                Some(d) if d < size => {
                    shorter.clear();
                    shorter.extend_from_slice(&full[..d]);
                    let norm = shorter.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                    shorter.iter_mut().for_each(|v| *v /= norm);
                    &shorter
                }
                _ => full,
            };
            if self.base64 {
                out.push(b'"');
                write_base64(vector, &mut out);
                out.push(b'"');
            } else {
                out.push(b'[');
                if std::ptr::eq(vector.as_ptr(), full.as_ptr()) {
                    let start = row * size;
                    wirespeed_json::encode_tensor_range(
                        &embedding.data,
                        start..start + size,
                        &mut out,
                    );
                } else {
                    wirespeed_json::encode_tensor_data(
                        &TensorData::Fp32(vector.to_vec()),
                        &mut out,
                    );
                }
                out.push(b']');
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"],\"model\":");
        wirespeed_json::encode_string(&self.model, &mut out);
        out.extend_from_slice(b",\"usage\":{\"prompt_tokens\":");
        out.extend_from_slice(itoa::Buffer::new().format(tokens).as_bytes());
        out.extend_from_slice(b",\"total_tokens\":");
        out.extend_from_slice(itoa::Buffer::new().format(tokens).as_bytes());
        out.extend_from_slice(b"}}");
        Ok(response::json(out))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        error_with(error, message, None)
    }
}

/// `vector`'s little-endian FP32 bytes in base64, as OpenAI's
/// `encoding_format: "base64"` carries them: encoded from the tensor's own
/// bytes where the machine is little-endian, into the body.
fn write_base64(vector: &[f32], out: &mut Vec<u8>) {
    let engine = &base64::engine::general_purpose::STANDARD;
    let owned: Vec<u8>;
    let bytes: &[u8] = if cfg!(target_endian = "little") {
        bytemuck::cast_slice(vector)
    } else {
        owned = vector.iter().flat_map(|v| v.to_le_bytes()).collect();
        &owned
    };
    let start = out.len();
    let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
    out.resize(start + len, 0);
    let written = engine.encode_slice(bytes, &mut out[start..]).unwrap_or(0);
    out.truncate(start + written);
}
