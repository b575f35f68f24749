//! `POST /v1/chat/completions` and `POST /v1/completions` on a model that
//! generates text as Triton's LLM models do: it takes the prompt as
//! `text_input` (BYTES) and answers `text_output`, once or, decoupled,
//! as a stream of pieces. A chat's messages become the prompt through the
//! model's chat template (`[chat]`, or its folder's
//! `tokenizer_config.json`; `wirespeed-text`'s `chat.rs`).
//!
//! The sampling fields go to the model as request parameters of their
//! OpenAI names (`max_tokens`, `temperature`, `top_p`, `seed`, `stop` and
//! `tools`/`tool_choice`/`response_format` as JSON text), and, where the
//! model declares them, as its inputs: `stream` (BOOL), `sampling_parameters`
//! (BYTES, the fields as one JSON object, as Triton's vLLM backend takes
//! them), and `max_tokens`, `temperature`, `top_p` and `seed` by name.
//! A model may answer `finish_reason` (BYTES) beside `text_output`, and
//! `tool_calls` (BYTES, OpenAI's `tool_calls` JSON array).
//!
//! With `stream: true` each piece is one server-sent event
//! (`chat.completion.chunk` or `text_completion`) written when the model
//! sends it; the last carries the finish reason, `stream_options.
//! include_usage` adds the usage event, and `data: [DONE]` ends the
//! stream. A client that leaves cancels the model's request. Usage counts
//! tokens with the model's tokenizer when it has one, else the pieces
//! streamed.
//!
//! The request is read and checked in `ask.rs` (a chat's conversation or
//! a completion's prompt, typed as `Prompt`); a stream's chunks are
//! written by `chunks.rs`.

use std::sync::{Arc, Mutex};

use hyper::Response;
use serde_json::{json, Value};
use wirespeed_core::{
    DataType, Error, InferRequest, InferResponse, ParameterValue, Tensor, TensorData,
};

use super::ask::{parse, Ask, Prompt};
use super::chunks::{Chunks, Delta, Tally};
use super::request::Request;
use super::{error_with, now, Endpoint, Refusal};
use crate::protocols::http::events;
use crate::protocols::http::response::{self, Body};
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{self, Codec};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::stream::ResponseStream;
use wirespeed_engine::timing::Stages;

/// The codec of one chat (`endpoint`) or completion request `id` to
/// `model`, a model of ours, from the request's fields, or the refusal of
/// a field.
pub(super) fn codec(
    model: String,
    endpoint: Endpoint,
    request: &mut Request,
    id: u64,
) -> Result<Completions, Refusal> {
    let chat = endpoint == Endpoint::ChatCompletions;
    let ask = parse(request, chat)?;
    Ok(Completions {
        ask,
        model,
        id: format!("{}-{id}", if chat { "chatcmpl" } else { "cmpl" }),
        prompt_tokens: None,
        counter: None,
        param: None,
    })
}

/// The codec of one chat or completion request.
pub(super) struct Completions {
    ask: Ask,
    /// The field an error of the model's names (`messages`, when its chat
    /// template refused them).
    param: Option<&'static str>,
    model: String,
    /// `chatcmpl-N` or `cmpl-N`.
    id: String,
    /// The prompt's tokens, by the model's tokenizer.
    prompt_tokens: Option<usize>,
    /// Counts the answer's tokens with the model's tokenizer.
    counter: Option<Counter>,
}

/// The model, whose tokenizer counts an answer's tokens.
type Counter = std::sync::Arc<dyn wirespeed_core::Model>;

impl Completions {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.ask.chat(), chunk) {
            (true, false) => "chat.completion",
            (true, true) => "chat.completion.chunk",
            (false, _) => "text_completion",
        }
    }

    /// The answer's token count: by the tokenizer, else the pieces.
    fn completion_tokens(&self, text: &str, pieces: usize) -> usize {
        self.counter
            .as_ref()
            .and_then(|model| model.text()?.count_tokens(text))
            .unwrap_or(pieces)
    }
}

/// What the model said in one response.
#[derive(Default)]
struct Said {
    text: String,
    finish_reason: Option<String>,
    tool_calls: Option<Value>,
}

fn said(response: &InferResponse) -> Result<Said, Error> {
    let text = |name: &str| -> Result<Option<String>, Error> {
        let Some(t) = response.outputs.iter().find(|t| t.name == name) else {
            return Ok(None);
        };
        let TensorData::Bytes(items) = &t.data else {
            return Err(Error::model_failed(format!(
                "model '{}' answered '{name}' as {}, not BYTES",
                response.model_name,
                t.data.datatype()
            )));
        };
        let joined: Vec<u8> = items.concat();
        String::from_utf8(joined).map(Some).map_err(|_| {
            Error::model_failed(format!(
                "model '{}' answered '{name}' that is not UTF-8",
                response.model_name
            ))
        })
    };
    let Some(body) = text("text_output")? else {
        return Err(Error::model_failed(format!(
            "model '{}' answered no 'text_output' (it gave {})",
            response.model_name,
            response
                .outputs
                .iter()
                .map(|t| format!("'{}'", t.name))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let tool_calls = match text("tool_calls")? {
        Some(json) if !json.is_empty() => Some(serde_json::from_str(&json).map_err(|e| {
            Error::model_failed(format!(
                "model '{}' answered 'tool_calls' that is not JSON: {e}",
                response.model_name
            ))
        })?),
        _ => None,
    };
    Ok(Said {
        text: body,
        finish_reason: text("finish_reason")?.filter(|r| !r.is_empty()),
        tool_calls,
    })
}

impl Codec for Completions {
    type Answer = Response<Body>;
    const PROTOCOL: InferProtocol = InferProtocol::OpenAi;

    async fn decode(
        &mut self,
        model: &mut Arc<ServedModel>,
        _stages: &mut Stages,
    ) -> Result<InferRequest, Error> {
        let model: &ServedModel = model;
        self.counter = Some(std::sync::Arc::clone(&model.model));
        let text = model.model.text();
        let prompt = match &mut self.ask.prompt {
            Prompt::Chat { messages, tools } => {
                let tools = tools.as_ref().map(Value::to_string);
                let rendered = text
                    .and_then(|t| t.chat_prompt(messages.get(), tools.as_deref()))
                    .ok_or_else(|| {
                        Error::invalid_input(format!(
                            "model '{}' has no chat template (a [chat] table, or a \
                         tokenizer_config.json with a chat_template in its folder); ask \
                         /v1/completions with a prompt",
                            self.model
                        ))
                    })?;
                rendered.map_err(|e| {
                    self.param = Some("messages");
                    Error::invalid_input(e)
                })?
            }
            Prompt::Text(prompt) => std::mem::take(prompt),
        };
        self.prompt_tokens = text.and_then(|t| t.count_tokens(&prompt));
        let metadata = model.metadata();
        let Some(spec) = metadata.inputs.iter().find(|s| s.name == "text_input") else {
            return Err(Error::invalid_input(format!(
                "model '{}' takes no 'text_input' (BYTES): it does not generate text",
                self.model
            )));
        };
        if spec.datatype != DataType::Bytes {
            return Err(Error::invalid_input(format!(
                "model '{}' takes 'text_input' as {}; a generating model takes BYTES",
                self.model, spec.datatype
            )));
        }
        let ones = |shape: &[i64]| -> Vec<usize> { vec![1; shape.len().max(1)] };
        // The sampling fields as JSON, once: the model's parameters, and its
        // `sampling_parameters` input when it has one.
        let sampling = self.ask.sampling.to_object();
        let mut inputs = vec![Tensor {
            name: "text_input".into(),
            shape: ones(&spec.shape),
            data: TensorData::Bytes(vec![prompt.into_bytes()]),
            parameters: Vec::new(),
        }];
        for spec in metadata.inputs.iter().filter(|s| s.name != "text_input") {
            let shape = ones(&spec.shape);
            let data = match spec.name.as_str() {
                "stream" => Some(TensorData::Bool(vec![self.ask.stream])),
                "sampling_parameters" => {
                    Some(TensorData::Bytes(vec![
                        serde_json::to_vec(&sampling).unwrap_or_default()
                    ]))
                }
                name => self
                    .ask
                    .sampling
                    .number(name)
                    .and_then(|x| TensorData::Fp64(vec![x]).cast_number(spec.datatype)),
            };
            match data {
                Some(data) => inputs.push(Tensor {
                    name: spec.name.clone(),
                    shape,
                    data,
                    parameters: Vec::new(),
                }),
                None if spec.optional => {}
                None => {
                    return Err(Error::invalid_input(format!(
                        "model '{}' takes an input '{}' that an OpenAI request does not give",
                        self.model, spec.name
                    )))
                }
            }
        }
        let parameters = sampling
            .into_iter()
            .map(|(k, v)| {
                let value = match &v {
                    Value::Bool(b) => ParameterValue::Bool(*b),
                    Value::Number(n) => match n.as_i64() {
                        Some(i) => ParameterValue::Int(i),
                        None => ParameterValue::Float(n.as_f64().unwrap_or(0.0)),
                    },
                    Value::String(s) => ParameterValue::String(s.clone()),
                    other => ParameterValue::String(other.to_string()),
                };
                (k, value)
            })
            .collect();
        Ok(InferRequest {
            inputs,
            parameters,
            ..InferRequest::default()
        })
    }

    fn encode(&mut self, response: InferResponse) -> Result<Response<Body>, Error> {
        let said = said(&response)?;
        let pieces = usize::from(!said.text.is_empty());
        if self.ask.stream {
            // A model that answers once, asked for a stream: its answer as
            // the stream's one piece.
            return Ok(self.once_as_events(said, pieces));
        }
        Ok(self.whole(said, pieces))
    }

    async fn encode_stream(&mut self, mut stream: ResponseStream) -> Result<Response<Body>, Error> {
        if !self.ask.stream {
            let mut all = Said::default();
            let mut pieces = 0;
            while let Some(item) = stream.next().await {
                let piece = said(&item.response?)?;
                pieces += usize::from(!piece.text.is_empty());
                all.text.push_str(&piece.text);
                all.finish_reason = piece.finish_reason.or(all.finish_reason);
                all.tool_calls = piece.tool_calls.or(all.tool_calls);
                if item.last {
                    break;
                }
            }
            return Ok(self.whole(all, pieces));
        }
        Ok(self.streamed(stream))
    }

    fn stamp(answer: &mut Response<Body>, timing: &str, default: bool) {
        response::stamp(answer, timing, default);
    }

    fn error(&self, error: &Error, message: &str) -> Response<Body> {
        error_with(error, message, self.param)
    }
}

impl Completions {
    /// The answer in one body.
    fn whole(&self, said: Said, pieces: usize) -> Response<Body> {
        let completion = self.completion_tokens(&said.text, pieces);
        let prompt = self.prompt_tokens.unwrap_or(0);
        let finish = said.finish_reason.unwrap_or_else(|| {
            if said.tool_calls.is_some() {
                "tool_calls"
            } else {
                "stop"
            }
            .into()
        });
        let choice = if self.ask.chat() {
            let mut message = json!({ "role": "assistant", "content": said.text });
            if let Some(calls) = said.tool_calls {
                message["tool_calls"] = calls;
            }
            json!({ "index": 0, "message": message, "logprobs": null, "finish_reason": finish })
        } else {
            json!({ "index": 0, "text": said.text, "logprobs": null, "finish_reason": finish })
        };
        let body = json!({
            "id": self.id,
            "object": self.object(false),
            "created": now(),
            "model": self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        });
        response::json(body.to_string())
    }

    /// A whole answer as the events of a stream of one piece.
    fn once_as_events(&self, said: Said, pieces: usize) -> Response<Body> {
        let head = json!({
            "id": self.id,
            "object": self.object(true),
            "created": now(),
            "model": self.model,
        });
        let mut out = Vec::with_capacity(512);
        let mut event = |choices: Value, usage: Option<Value>| {
            let mut e = head.clone();
            e["choices"] = choices;
            if let Some(usage) = usage {
                e["usage"] = usage;
            }
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(e.to_string().as_bytes());
            out.extend_from_slice(b"\n\n");
        };
        let finish = said.finish_reason.clone().unwrap_or_else(|| "stop".into());
        if self.ask.chat() {
            let mut delta = json!({ "role": "assistant", "content": said.text });
            if let Some(calls) = &said.tool_calls {
                delta["tool_calls"] = calls.clone();
            }
            event(
                json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": null }]),
                None,
            );
            event(
                json!([{ "index": 0, "delta": {}, "logprobs": null, "finish_reason": finish }]),
                None,
            );
        } else {
            event(
                json!([{ "index": 0, "text": said.text, "logprobs": null, "finish_reason": finish }]),
                None,
            );
        }
        if self.ask.include_usage {
            let completion = self.completion_tokens(&said.text, pieces);
            let prompt = self.prompt_tokens.unwrap_or(0);
            event(
                json!([]),
                Some(json!({
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                })),
            );
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        let mut answer = response::json(out);
        answer.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        answer
    }

    /// The answer as server-sent events, one a piece as the model sends it.
    fn streamed(&mut self, stream: ResponseStream) -> Response<Body> {
        let chunks = Chunks::new(&self.id, self.object(true), &self.model, self.ask.chat());
        let end_chunks = chunks.clone();
        let chat = self.ask.chat();
        let include_usage = self.ask.include_usage;
        let prompt_tokens = self.prompt_tokens.unwrap_or(0);
        let counter = self.counter.take();
        let tally = Arc::new(Mutex::new(Tally::default()));
        let kept = Arc::clone(&tally);
        let mut first = true;
        let encode: events::EncodeEvents = Box::new(move |item, out| {
            let Ok(mut tally) = kept.lock() else { return };
            if tally.finished {
                return;
            }
            if first && chat {
                chunks.write(Delta::Role, None, out);
            }
            first = false;
            match item.response.and_then(|r| said(&r)) {
                Ok(piece) => {
                    if !piece.text.is_empty() {
                        tally.pieces += 1;
                        if include_usage {
                            tally.text.push_str(&piece.text);
                        }
                        chunks.write(Delta::Content(&piece.text), None, out);
                    }
                    if let Some(calls) = &piece.tool_calls {
                        chunks.write(Delta::ToolCalls(calls), None, out);
                    }
                    if let Some(reason) = &piece.finish_reason {
                        chunks.write(Delta::Empty, Some(reason), out);
                        tally.finished = true;
                    } else if item.last {
                        chunks.write(Delta::Empty, Some("stop"), out);
                        tally.finished = true;
                    }
                }
                Err(e) => {
                    let message = pipeline::public_message(&e, 0);
                    let body = json!({ "error": { "message": message, "type": "server_error", "param": null, "code": null } });
                    out.extend_from_slice(b"data: ");
                    out.extend_from_slice(body.to_string().as_bytes());
                    out.extend_from_slice(b"\n\n");
                    tally.finished = true;
                }
            }
        });
        let end: events::End = Box::new(move |out| {
            let Ok(tally) = tally.lock() else { return };
            if !tally.finished {
                // The model ended without flagging its last response.
                end_chunks.write(Delta::Empty, Some("stop"), out);
            }
            if include_usage {
                let completion = counter
                    .as_ref()
                    .and_then(|model| model.text()?.count_tokens(&tally.text))
                    .unwrap_or(tally.pieces);
                end_chunks.usage(prompt_tokens, completion, out);
            }
            out.extend_from_slice(b"data: [DONE]\n\n");
        });
        events::answer_with_end(stream, encode, Some(end))
    }
}
