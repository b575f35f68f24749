//! An OpenAI request's body, read once: its top-level fields in one pass,
//! before the model it names is looked up.
//!
//! What happens next depends on that model, so nothing is checked here
//! but the JSON itself and `model`: a model on an upstream's OpenAI API
//! gets the body as its client wrote it (`relay.rs`), fields the upstream
//! takes and OpenAI does not included; a model of ours has its endpoint's
//! fields checked (`ask.rs`, `embeddings.rs`). A chat's `messages`, most
//! of a chat's bytes, are kept as their JSON text, not read into a tree
//! here: the model's chat template reads them (`wirespeed-text`'s
//! `chat.rs`), once.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use wirespeed_core::Error;

/// A request body, read.
pub(super) struct Request {
    /// The model named.
    pub(super) model: String,
    /// The other fields but `messages`.
    pub(super) fields: Map<String, Value>,
    /// A chat's `messages`, as sent.
    pub(super) messages: Option<Box<RawValue>>,
    /// The body, for a model that forwards it.
    pub(super) body: Vec<u8>,
}

impl Request {
    /// Reads `body`: a JSON object naming a model.
    pub(super) fn read(body: Vec<u8>) -> Result<Request, (Error, Option<&'static str>)> {
        let mut deserializer = serde_json::Deserializer::from_slice(&body);
        let fields = <Fields as de::Deserialize>::deserialize(&mut deserializer)
            .and_then(|fields| deserializer.end().map(|()| fields))
            .map_err(|e| {
                let error = if e.is_data() {
                    Error::malformed("the request body is not a JSON object")
                } else {
                    Error::malformed(format!(
                        "We could not parse the JSON body of your request: {e}"
                    ))
                };
                (error, None)
            })?;
        let Fields {
            mut fields,
            messages,
        } = fields;
        let model = match fields.remove("model") {
            Some(Value::String(m)) if !m.is_empty() => m,
            Some(_) => {
                return Err((
                    Error::invalid_input("'model' must be a model's name"),
                    Some("model"),
                ))
            }
            None => {
                return Err((
                    Error::invalid_input(
                        "you must provide a model parameter: the name of a served model",
                    ),
                    Some("model"),
                ))
            }
        };
        Ok(Request {
            model,
            fields,
            messages,
            body,
        })
    }

    /// Whether the client asks for a stream (`stream: true`).
    pub(super) fn streams(&self) -> bool {
        self.fields.get("stream").and_then(Value::as_bool) == Some(true)
    }
}

/// The top-level fields, as the visitor gathers them.
struct Fields {
    fields: Map<String, Value>,
    messages: Option<Box<RawValue>>,
}

impl<'de> de::Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Fields, D::Error> {
        deserializer.deserialize_map(Fields {
            fields: Map::new(),
            messages: None,
        })
    }
}

impl<'de> Visitor<'de> for Fields {
    type Value = Fields;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Fields, A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "messages" {
                self.messages = Some(map.next_value()?);
            } else {
                let value = map.next_value()?;
                self.fields.insert(key, value);
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_messages_are_read_in_one_pass() {
        let body = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.5, "top_k": 20}"#;
        let request = Request::read(body.to_vec()).unwrap();
        assert_eq!(request.model, "m");
        assert_eq!(
            request.messages.unwrap().get(),
            r#"[{"role": "user", "content": "hi"}]"#
        );
        assert_eq!(request.fields["temperature"], 0.5);
        assert_eq!(request.fields["top_k"], 20);
        assert!(!request.fields.contains_key("model"));
    }

    #[test]
    fn a_body_that_is_not_an_object_naming_a_model_is_refused() {
        for (body, param, words) in [
            (&b"{not json"[..], None, "could not parse"),
            (b"[1, 2]", None, "not a JSON object"),
            (b"{\"model\": 3}", Some("model"), "model's name"),
            (b"{\"input\": \"x\"}", Some("model"), "provide a model"),
            (b"{\"model\": \"m\"} trailing", None, "could not parse"),
        ] {
            let Err((error, at)) = Request::read(body.to_vec()) else {
                panic!("{} was read", String::from_utf8_lossy(body));
            };
            assert_eq!(at, param);
            assert!(error.message().contains(words), "{}", error.message());
        }
    }
}
