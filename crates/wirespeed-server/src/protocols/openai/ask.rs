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

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
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

/// One chat or completion request to a model of ours, typed and checked.
pub(super) struct Ask {
    /// The conversation or the prompt.
    pub(super) prompt: Prompt,
    /// Answer as server-sent events, a piece at a time.
    pub(super) stream: bool,
    /// End a stream with the usage event (`stream_options.include_usage`).
    pub(super) include_usage: bool,
    /// What steers the generation, as the model gets it.
    pub(super) sampling: Sampling,
}

impl Ask {
    /// A chat, not a completion.
    pub(super) fn chat(&self) -> bool {
        matches!(self.prompt, Prompt::Chat { .. })
    }
}

/// The fields that steer the generation, as the model gets them (one JSON
/// object, `sampling_parameters`, and request parameters of their names).
/// Fields OpenAI's API has but no model is given (`n`, `user`, `store`...)
/// are checked or accepted, not kept.
#[derive(Debug, Default, PartialEq, Serialize)]
pub(super) struct Sampling {
    /// `max_completion_tokens`, or the older `max_tokens`: 1 or more.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_tokens: Option<u64>,
    /// 0 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) temperature: Option<f64>,
    /// 0 to 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) top_p: Option<f64>,
    /// -2 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) seed: Option<i64>,
    /// Up to 4 strings (a single string is a list of one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stop: Option<Vec<String>>,
    /// Passed on as sent: the model reads them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) logprobs: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) top_logprobs: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tools: Option<Value>,
    /// The SDK's `extra_body`: fields OpenAI's API does not have (vLLM's
    /// `top_k`, `repetition_penalty`...), as sent.
    #[serde(flatten)]
    pub(super) extra_body: Map<String, Value>,
}

impl Sampling {
    /// The fields as one JSON object.
    pub(super) fn to_object(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(object)) => object,
            _ => Map::new(),
        }
    }

    /// A numeric field by name, for a model that takes it as an input.
    pub(super) fn number(&self, name: &str) -> Option<f64> {
        match name {
            "max_tokens" => self.max_tokens.map(|m| m as f64),
            "temperature" => self.temperature,
            "top_p" => self.top_p,
            "frequency_penalty" => self.frequency_penalty,
            "presence_penalty" => self.presence_penalty,
            "seed" => self.seed.map(|s| s as f64),
            _ => self.extra_body.get(name).and_then(Value::as_f64),
        }
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
    // The sampling fields, checked for their types and ranges.
    let number = |key: &'static str, low: f64, high: f64| -> Result<Option<f64>, Refusal> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_f64().is_some_and(|x| (low..=high).contains(&x)) => {
                Ok(n.as_f64())
            }
            Some(other) => Err(invalid(
                key,
                format!("'{key}' is {other}; it is a number from {low} to {high}"),
            )),
        }
    };
    let whole = |key: &'static str| -> Result<Option<i64>, Refusal> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) if n.as_i64().is_some() => Ok(n.as_i64()),
            Some(other) => Err(invalid(
                key,
                format!("'{key}' is {other}; it is a whole number"),
            )),
        }
    };
    let max_tokens = match whole("max_completion_tokens")?.or(whole("max_tokens")?) {
        Some(m) if m >= 1 => Some(m as u64),
        Some(m) => {
            return Err(invalid(
                "max_tokens",
                format!("'max_tokens' is {m}; it is 1 or more"),
            ))
        }
        None => None,
    };
    let stop = match object.get("stop") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(vec![s.clone()]),
        Some(Value::Array(items)) if items.len() <= 4 && items.iter().all(Value::is_string) => {
            Some(
                items
                    .iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect(),
            )
        }
        Some(_) => {
            return Err(invalid(
                "stop",
                "'stop' is a string or a list of up to 4 strings".into(),
            ))
        }
    };
    let as_sent = |key: &str| object.get(key).filter(|v| !v.is_null()).cloned();
    // The SDK's extra_body: the fields OpenAI's API does not have.
    let known = if chat { CHAT_KEYS } else { COMPLETION_KEYS };
    let extra_body = object
        .iter()
        .filter(|(key, value)| !known.contains(&key.as_str()) && !value.is_null())
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let sampling = Sampling {
        max_tokens,
        temperature: number("temperature", 0.0, 2.0)?,
        top_p: number("top_p", 0.0, 1.0)?,
        frequency_penalty: number("frequency_penalty", -2.0, 2.0)?,
        presence_penalty: number("presence_penalty", -2.0, 2.0)?,
        seed: whole("seed")?,
        stop,
        logprobs: as_sent("logprobs"),
        top_logprobs: as_sent("top_logprobs"),
        tool_choice: as_sent("tool_choice"),
        response_format: as_sent("response_format"),
        tools: as_sent("tools"),
        extra_body,
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str) -> Request {
        Request::read(body.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_chat_is_typed_and_its_extra_body_kept() {
        let mut request = read(
            r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 7, "max_tokens": 99, "temperature": 1, "stop": "END",
                "seed": -3, "user": "u", "n": 1, "top_k": 20, "repetition_penalty": 1.1,
                "tools": [{"type": "function"}], "stream": true,
                "stream_options": {"include_usage": true}}"#,
        );
        let ask = parse(&mut request, true).unwrap();
        assert!(ask.chat() && ask.stream && ask.include_usage);
        let Prompt::Chat { messages, tools } = &ask.prompt else {
            unreachable!()
        };
        assert_eq!(messages.get(), r#"[{"role": "user", "content": "hi"}]"#);
        assert_eq!(tools.as_ref().unwrap()[0]["type"], "function");
        let s = &ask.sampling;
        // max_completion_tokens wins over the older max_tokens.
        assert_eq!(s.max_tokens, Some(7));
        assert_eq!(s.temperature, Some(1.0));
        assert_eq!(s.stop.as_deref(), Some(&["END".to_owned()][..]));
        assert_eq!(s.seed, Some(-3));
        assert_eq!(s.number("top_k"), Some(20.0));
        // OpenAI's fields that steer nothing are not the model's.
        let object = s.to_object();
        assert!(!object.contains_key("user") && !object.contains_key("n"));
        assert_eq!(object["repetition_penalty"], 1.1);
        assert_eq!(object["temperature"], 1.0);
    }

    #[test]
    fn a_bad_field_is_refused_naming_it() {
        for (body, param) in [
            (
                r#"{"model": "m", "prompt": "x", "temperature": 3}"#,
                "temperature",
            ),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": 0}"#,
                "max_tokens",
            ),
            (r#"{"model": "m", "prompt": "x", "seed": 1.5}"#, "seed"),
            (r#"{"model": "m", "prompt": "x", "stop": ["a", 1]}"#, "stop"),
            (r#"{"model": "m", "prompt": "x", "n": 2}"#, "n"),
            (
                r#"{"model": "m", "prompt": "x", "stream": "yes"}"#,
                "stream",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stream_options": {"include_usage": true}}"#,
                "stream_options",
            ),
            (r#"{"model": "m", "prompt": ["a", "b"]}"#, "prompt"),
            (
                r#"{"model": "m", "prompt": "x", "messages": []}"#,
                "messages",
            ),
        ] {
            let Err((_, at)) = parse(&mut read(body), false) else {
                panic!("{body} was taken");
            };
            assert_eq!(at, Some(param), "{body}");
        }
        let Err((_, at)) = parse(&mut read(r#"{"model": "m"}"#), true) else {
            panic!("a chat without messages was taken");
        };
        assert_eq!(at, Some("messages"));
    }
}
