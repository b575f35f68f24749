//! What a chat or completion request asks (`POST /v1/chat/completions`,
//! `POST /v1/completions`) of a model of ours, from its fields as
//! `request.rs` read them, checked field by field, each refusal in
//! OpenAI's words naming the field at fault: the conversation or the
//! prompt, whether to stream, and the sampling fields as the model gets
//! them. The codec that runs it is `completions.rs`.
//!
//! Fields OpenAI's API does not have are the SDK's `extra_body` (vLLM's
//! `top_k`, `repetition_penalty`...): they go to the model with the
//! sampling fields, as vLLM and Triton's vLLM backend take them.

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use wirespeed_core::Error;

use super::request::Request;
use super::Refusal;

/// The fields of OpenAI's chat requests.
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

/// The fields of OpenAI's completion requests.
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

/// What the model is to continue.
pub(super) enum Prompt {
    /// A chat: its messages as sent, and its tools, rendered with the
    /// model's chat template.
    Chat {
        messages: Box<RawValue>,
        tools: Option<Value>,
    },
    /// A completion's prompt, as given.
    Text(String),
}

/// One chat or completion request, as parsed.
pub(super) struct Ask {
    /// The conversation or the prompt.
    pub(super) prompt: Prompt,
    /// Answer as server-sent events, a piece at a time.
    pub(super) stream: bool,
    /// End a stream with the usage event (`stream_options.include_usage`).
    pub(super) include_usage: bool,
    /// The sampling fields, as the model gets them.
    pub(super) sampling: Map<String, Value>,
}

impl Ask {
    /// A chat, not a completion.
    pub(super) fn chat(&self) -> bool {
        matches!(self.prompt, Prompt::Chat { .. })
    }
}

/// Reads what a chat (`chat`) or a completion `request` asks, each field
/// checked, or the refusal in OpenAI's words naming the field at fault.
pub(super) fn parse(request: &mut Request, chat: bool) -> Result<Ask, Refusal> {
    let object = &request.fields;
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
    let prompt = if chat {
        let Some(messages) = request.messages.take() else {
            return Err(invalid(
                "messages",
                "you must provide 'messages': the conversation so far".into(),
            ));
        };
        Prompt::Chat {
            messages,
            tools: object.get("tools").filter(|t| !t.is_null()).cloned(),
        }
    } else {
        if request.messages.is_some() {
            return Err(invalid(
                "messages",
                "'messages' belongs to /v1/chat/completions; /v1/completions takes a 'prompt'"
                    .into(),
            ));
        }
        Prompt::Text(prompt(object)?)
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
    // The SDK's extra_body: the fields OpenAI's API does not have.
    let known = if chat { CHAT_KEYS } else { COMPLETION_KEYS };
    for (key, value) in object {
        if !known.contains(&key.as_str()) && !value.is_null() {
            sampling.insert(key.clone(), value.clone());
        }
    }
    Ok(Ask {
        prompt,
        stream,
        include_usage,
        sampling,
    })
}

/// A completion's prompt: a string, or a list of one.
fn prompt(object: &Map<String, Value>) -> Result<String, Refusal> {
    let invalid = |param: &'static str, what: String| (Error::invalid_input(what), Some(param));
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
    Ok(prompt)
}
