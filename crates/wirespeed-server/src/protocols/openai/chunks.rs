//! A chat or completion stream's events, written as the model's pieces
//! come: the part every chunk shares made once, each piece's text escaped
//! after it, and what the stream has said so far (for its last chunk and
//! its usage).

use std::sync::Arc;

use serde_json::Value;

use super::now;

/// What a stream has said so far.
#[derive(Default)]
pub(super) struct Tally {
    /// The answer, kept only to count its tokens for `include_usage`.
    pub(super) text: String,
    /// The pieces with text.
    pub(super) pieces: usize,
    /// The last chunk is written.
    pub(super) finished: bool,
}

/// What one chunk of a stream says.
pub(super) enum Delta<'a> {
    /// The first chunk of a chat: the assistant's role.
    Role,
    /// A piece of the answer.
    Content(&'a str),
    /// The tool calls the model answered.
    ToolCalls(&'a Value),
    /// No delta: the last chunk, with the finish reason.
    Empty,
}

/// Writes a stream's chunks: the part every chunk shares made once
/// (`id`, `object`, `created`, `model`), each piece's text as a JSON
/// string after it.
#[derive(Clone)]
pub(super) struct Chunks {
    /// `data: {"id":...,"model":...,"choices":[{"index":0,`
    head: Arc<Vec<u8>>,
    chat: bool,
}

impl Chunks {
    /// The chunks of stream `id` of `object` (`chat.completion.chunk`,
    /// `text_completion`) from `model`.
    pub(super) fn new(id: &str, object: &str, model: &str, chat: bool) -> Chunks {
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

    /// Writes one chunk: `delta`, and the finish reason when it is the last.
    pub(super) fn write(&self, delta: Delta<'_>, finish: Option<&str>, out: &mut Vec<u8>) {
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
    pub(super) fn usage(&self, prompt: usize, completion: usize, out: &mut Vec<u8>) {
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
