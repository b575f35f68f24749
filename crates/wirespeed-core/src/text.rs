//! A model's text face: whether it embeds, the smaller sizes its
//! embeddings may be asked in, how a chat's messages become its prompt,
//! and how many tokens a text is. Implemented by the wrappers of
//! `wirespeed-text` (a tokenizer and a chat template around a loaded
//! model); a model without one answers completions on the prompt as given.
//! A model on another server's OpenAI API [forwards](TextModel::forwards)
//! requests as their clients wrote them instead.

/// What the OpenAI API needs of a model beyond its tensors.
pub trait TextModel: Send + Sync {
    /// The model answers `text` with `embedding` (and `tokens`).
    fn embeds(&self) -> bool {
        false
    }

    /// The sizes smaller than its own an embedding may be asked in
    /// (`dimensions`): the first so many values, scaled to unit length
    /// again.
    fn embedding_sizes(&self) -> &[usize] {
        &[]
    }

    /// The prompt of a chat request, rendered with the model's chat
    /// template: `messages` is the request's list of messages as its
    /// client sent it (JSON text, read here and nowhere before), `tools`
    /// its tools (JSON text) when it gives them. `None` for a model
    /// without a template; an error names what in the messages is wrong.
    fn chat_prompt(&self, _messages: &str, _tools: Option<&str>) -> Option<Result<String, String>> {
        None
    }

    /// The tokens of `text` by the model's tokenizer; `None` without one.
    fn count_tokens(&self, _text: &str) -> Option<usize> {
        None
    }

    /// The model is another server's OpenAI API: each request goes to it
    /// as its client wrote it ([`JSON_BODY`](crate::JSON_BODY), the
    /// endpoint in the [`JSON_ENDPOINT`](crate::JSON_ENDPOINT) parameter),
    /// and its answer comes back as the upstream wrote it (`JSON_BODY`: the
    /// whole JSON, or a stream's events one response each). The upstream
    /// checks the fields.
    fn forwards(&self) -> bool {
        false
    }
}
