//! `POST /v1/chat/completions` and `POST /v1/completions` on a model that
//! generates text as Triton's LLM models do: it takes the prompt as
//! `text_input` (BYTES) and answers `text_output`, once or, decoupled,
//! as a stream of pieces. A chat's messages become the prompt through the
//! model's chat template (`[chat]`, or its folder's
//! `tokenizer_config.json`; `wirespeed-models`' `text/chat.rs`).
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

use std::sync::{Arc, Mutex};

use hyper::Response;
use serde_json::{json, Map, Value};
use wirespeed_core::{
    DataType, Error, InferRequest, InferResponse, ParameterValue, Tensor, TensorData,
};

use super::{error_with, known_keys, model_name, now, refused, Endpoint, Refusal};
use crate::protocols::http::events;
use crate::protocols::http::response::{self, Body};
use crate::protocols::Front;
use wirespeed_engine::metrics::InferProtocol;
use wirespeed_engine::pipeline::{self, Codec, RequestContext, Target};
use wirespeed_engine::served::ServedModel;
use wirespeed_engine::stream::ResponseStream;
use wirespeed_engine::timing::Stages;

const CHAT_KEYS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "n",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "temperature",
    "top_p",
    "seed",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "user",
    "metadata",
    "store",
];

const COMPLETION_KEYS: &[&str] = &[
    "model",
    "prompt",
    "stream",
    "stream_options",
    "n",
    "max_tokens",
    "stop",
    "temperature",
    "top_p",
    "seed",
    "logprobs",
    "echo",
    "suffix",
    "best_of",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "user",
];

/// One chat or completion request, as parsed.
struct Ask {
    chat: bool,
    /// The messages and tools, for the template (chat).
    conversation: Value,
    /// The prompt as given (completions).
    prompt: String,
    stream: bool,
    include_usage: bool,
    /// The sampling fields, as the model gets them.
    sampling: Map<String, Value>,
}

/// Answers one chat or completion request.
pub(crate) async fn answer(
    front: &Front,
    context: RequestContext,
    endpoint: Endpoint,
    object: &Map<String, Value>,
) -> Response<Body> {
    let id = context.id;
    let chat = endpoint == Endpoint::ChatCompletions;
    let (model, ask) = match parse(object, chat) {
        Ok(parsed) => parsed,
        Err(refusal) => return refused(refusal),
    };
    let codec = Completions {
        ask,
        model: model.clone(),
        id: format!(
            "{}-{id}",
            if endpoint == Endpoint::ChatCompletions {
                "chatcmpl"
            } else {
                "cmpl"
            }
        ),
        prompt_tokens: None,
        counter: None,
    };
    front
        .engine
        .infer(context, Target::new(&model, None), codec)
        .await
}

fn parse(object: &Map<String, Value>, chat: bool) -> Result<(String, Ask), Refusal> {
    known_keys(object, if chat { CHAT_KEYS } else { COMPLETION_KEYS }).map_err(|e| (e, None))?;
    let model = model_name(object).map_err(|e| (e, Some("model")))?;
    let invalid = |param: &'static str, what: String| (Error::invalid_input(what), Some(param));
    let flag = |key: &'static str| match object.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(invalid(
            key,
            format!("'{key}' is {other}; it is true or false"),
        )),
    };
    let stream = flag("stream")?;
    let include_usage = match object.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(invalid(
                    "stream_options",
                    format!("'stream_options.include_usage' is {other}; it is true or false"),
                ))
            }
        },
        Some(other) => {
            return Err(invalid(
                "stream_options",
                format!("'stream_options' is {other}; it is an object"),
            ))
        }
    };
    if include_usage && !stream {
        return Err(invalid(
            "stream_options",
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
        ));
    }
    match object.get("n") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 1) => {
            return Err(invalid(
                "n",
                "'n' above 1 is not served: one choice a request (send the request n times)".into(),
            ))
        }
        Some(other) => return Err(invalid("n", format!("'n' is {other}; it is 1"))),
    }
    let (conversation, prompt) = if chat {
        let messages = match object.get("messages") {
            Some(Value::Array(m)) if !m.is_empty() => m,
            Some(Value::Array(_)) => return Err(invalid("messages", "'messages' is empty".into())),
            Some(_) => {
                return Err(invalid(
                    "messages",
                    "'messages' must be a list of messages".into(),
                ))
            }
            None => {
                return Err(invalid(
                    "messages",
                    "you must provide 'messages': the conversation so far".into(),
                ))
            }
        };
        for (i, m) in messages.iter().enumerate() {
            let role = m.get("role").and_then(Value::as_str);
            if !matches!(
                role,
                Some("system" | "developer" | "user" | "assistant" | "tool" | "function")
            ) {
                return Err(invalid(
                    "messages",
                    format!(
                        "messages[{i}] has role {}; it is system, developer, user, assistant or \
                         tool",
                        m.get("role").map_or("none".into(), Value::to_string)
                    ),
                ));
            }
        }
        let mut conversation = Map::new();
        conversation.insert("messages".into(), Value::Array(messages.clone()));
        if let Some(tools) = object.get("tools").filter(|t| !t.is_null()) {
            conversation.insert("tools".into(), tools.clone());
        }
        (Value::Object(conversation), String::new())
    } else {
        let prompt = match object.get("prompt") {
            Some(Value::String(p)) => p.clone(),
            Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
                items[0].as_str().unwrap_or_default().to_owned()
            }
            Some(Value::Array(_)) => {
                return Err(invalid(
                    "prompt",
                    "'prompt' as a list is served with one string: one choice a request".into(),
                ))
            }
            Some(_) => return Err(invalid("prompt", "'prompt' must be a string".into())),
            None => return Err(invalid("prompt", "you must provide a 'prompt'".into())),
        };
        (Value::Null, prompt)
    };
    // The sampling fields, checked for their types, as the model gets them.
    let mut sampling = Map::new();
    let number = |key: &'static str, low: f64, high: f64| -> Result<Option<Value>, Refusal> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|x| (low..=high).contains(&x)) => {
                Ok(Some(Value::Number(n.clone())))
            }
            Some(other) => Err(invalid(
                key,
                format!("'{key}' is {other}; it is a number from {low} to {high}"),
            )),
        }
    };
    let whole = |key: &'static str| -> Result<Option<Value>, Refusal> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() || n.as_i64().is_some() => {
                Ok(Some(Value::Number(n.clone())))
            }
            Some(other) => Err(invalid(
                key,
                format!("'{key}' is {other}; it is a whole number"),
            )),
        }
    };
    let max_tokens = match (whole("max_completion_tokens")?, whole("max_tokens")?) {
        (Some(m), _) | (None, Some(m)) => Some(m),
        (None, None) => None,
    };
    if let Some(m) = &max_tokens {
        if m.as_u64().is_none_or(|m| m == 0) {
            return Err(invalid(
                "max_tokens",
                format!("'max_tokens' is {m}; it is 1 or more"),
            ));
        }
        sampling.insert("max_tokens".into(), m.clone());
    }
    for (key, low, high) in [
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("frequency_penalty", -2.0, 2.0),
        ("presence_penalty", -2.0, 2.0),
    ] {
        if let Some(v) = number(key, low, high)? {
            sampling.insert(key.into(), v);
        }
    }
    if let Some(seed) = whole("seed")? {
        sampling.insert("seed".into(), seed);
    }
    match object.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            sampling.insert("stop".into(), json!([s]));
        }
        Some(Value::Array(items)) if items.len() <= 4 && items.iter().all(Value::is_string) => {
            sampling.insert("stop".into(), Value::Array(items.clone()));
        }
        Some(_) => {
            return Err(invalid(
                "stop",
                "'stop' is a string or a list of up to 4 strings".into(),
            ))
        }
    }
    for key in [
        "logprobs",
        "top_logprobs",
        "tool_choice",
        "response_format",
        "tools",
    ] {
        if let Some(v) = object.get(key).filter(|v| !v.is_null()) {
            sampling.insert(key.into(), v.clone());
        }
    }
    Ok((
        model,
        Ask {
            chat,
            conversation,
            prompt,
            stream,
            include_usage,
            sampling,
        },
    ))
}

/// The codec of one chat or completion request.
struct Completions {
    ask: Ask,
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
        match (self.ask.chat, chunk) {
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
        let prompt = if self.ask.chat {
            let rendered = text
                .and_then(|t| t.chat_prompt(&self.ask.conversation.to_string()))
                .ok_or_else(|| {
                    Error::invalid_input(format!(
                        "model '{}' has no chat template (a [chat] table, or a \
                         tokenizer_config.json with a chat_template in its folder); ask \
                         /v1/completions with a prompt",
                        self.model
                    ))
                })?;
            rendered.map_err(|e| Error::invalid_input(format!("messages: {e}")))?
        } else {
            std::mem::take(&mut self.ask.prompt)
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
        let mut inputs = vec![Tensor {
            name: "text_input".into(),
            shape: ones(&spec.shape),
            data: TensorData::Bytes(vec![prompt.into_bytes()]),
        }];
        for spec in metadata.inputs.iter().filter(|s| s.name != "text_input") {
            let shape = ones(&spec.shape);
            let data = match spec.name.as_str() {
                "stream" => Some(TensorData::Bool(vec![self.ask.stream])),
                "sampling_parameters" => Some(TensorData::Bytes(vec![Value::Object(
                    self.ask.sampling.clone(),
                )
                .to_string()
                .into_bytes()])),
                name => self
                    .ask
                    .sampling
                    .get(name)
                    .and_then(Value::as_f64)
                    .and_then(|x| TensorData::Fp64(vec![x]).cast_number(spec.datatype)),
            };
            match data {
                Some(data) => inputs.push(Tensor {
                    name: spec.name.clone(),
                    shape,
                    data,
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
        let parameters = self
            .ask
            .sampling
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    Value::Bool(b) => ParameterValue::Bool(*b),
                    Value::Number(n) => match n.as_i64() {
                        Some(i) => ParameterValue::Int(i),
                        None => ParameterValue::Float(n.as_f64().unwrap_or(0.0)),
                    },
                    Value::String(s) => ParameterValue::String(s.clone()),
                    other => ParameterValue::String(other.to_string()),
                };
                (k.clone(), value)
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
        error_with(error, message, None)
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
        let choice = if self.ask.chat {
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
        if self.ask.chat {
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
        let chunks = Chunks::new(&self.id, self.object(true), &self.model, self.ask.chat);
        let end_chunks = chunks.clone();
        let chat = self.ask.chat;
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

/// What a stream has said so far.
#[derive(Default)]
struct Tally {
    /// The answer, kept only to count its tokens for `include_usage`.
    text: String,
    pieces: usize,
    finished: bool,
}

/// What one chunk of a stream says.
enum Delta<'a> {
    /// The first chunk of a chat: the assistant's role.
    Role,
    Content(&'a str),
    ToolCalls(&'a Value),
    Empty,
}

/// Writes a stream's chunks: the part every chunk shares made once
/// (`id`, `object`, `created`, `model`), each piece's text as a JSON
/// string after it.
#[derive(Clone)]
struct Chunks {
    /// `data: {"id":...,"model":...,"choices":[{"index":0,`
    head: Arc<Vec<u8>>,
    chat: bool,
}

impl Chunks {
    fn new(id: &str, object: &str, model: &str, chat: bool) -> Chunks {
        let mut head = Vec::with_capacity(128);
        head.extend_from_slice(b"data: {\"id\":");
        wirespeed_json::encode_string(id, &mut head);
        head.extend_from_slice(b",\"object\":");
        wirespeed_json::encode_string(object, &mut head);
        head.extend_from_slice(b",\"created\":");
        head.extend_from_slice(itoa::Buffer::new().format(now()).as_bytes());
        head.extend_from_slice(b",\"model\":");
        wirespeed_json::encode_string(model, &mut head);
        head.extend_from_slice(b",\"choices\":[");
        Chunks {
            head: Arc::new(head),
            chat,
        }
    }

    fn write(&self, delta: Delta<'_>, finish: Option<&str>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"{\"index\":0,");
        if self.chat {
            out.extend_from_slice(b"\"delta\":");
            match delta {
                Delta::Role => out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":\"\"}"),
                Delta::Content(text) => {
                    out.extend_from_slice(b"{\"content\":");
                    wirespeed_json::encode_string(text, out);
                    out.push(b'}');
                }
                Delta::ToolCalls(calls) => {
                    out.extend_from_slice(b"{\"tool_calls\":");
                    out.extend_from_slice(calls.to_string().as_bytes());
                    out.push(b'}');
                }
                Delta::Empty => out.extend_from_slice(b"{}"),
            }
        } else {
            out.extend_from_slice(b"\"text\":");
            match delta {
                Delta::Content(text) => wirespeed_json::encode_string(text, out),
                _ => out.extend_from_slice(b"\"\""),
            }
        }
        out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        match finish {
            Some(reason) => wirespeed_json::encode_string(reason, out),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b"}]}\n\n");
    }

    /// The usage chunk: no choices.
    fn usage(&self, prompt: usize, completion: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"],\"usage\":{\"prompt_tokens\":");
        out.extend_from_slice(itoa::Buffer::new().format(prompt).as_bytes());
        out.extend_from_slice(b",\"completion_tokens\":");
        out.extend_from_slice(itoa::Buffer::new().format(completion).as_bytes());
        out.extend_from_slice(b",\"total_tokens\":");
        out.extend_from_slice(itoa::Buffer::new().format(prompt + completion).as_bytes());
        out.extend_from_slice(b"}}\n\n");
    }
}
