//! A model's text face, for the OpenAI API: whether it embeds, the
//! smaller sizes its embeddings may be asked in, how a chat request
//! becomes its prompt, and how many tokens a text is. Implemented by the
//! wrappers of `wirespeed-models`' `text` (a tokenizer and a chat
//! template around a loaded model); a model without one answers
//! completions on the prompt as given.

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

    /// The prompt of a chat request: `request` is a JSON object with
    /// `messages` (and `tools`, when given), rendered with the model's
    /// chat template. `None` for a model without one.
    fn chat_prompt(&self, _request: &str) -> Option<Result<String, String>> {
        None
    }

    /// The tokens of `text` by the model's tokenizer; `None` without one.
    fn count_tokens(&self, _text: &str) -> Option<usize> {
        None
    }
}
