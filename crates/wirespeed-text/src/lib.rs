//! Models that speak text, for the OpenAI API (`protocols/openai/` in the
//! server): an encoder made an embedder (`embedding.rs`: a Hugging Face
//! `tokenizer.json` in front, a pooling step behind), and a model that
//! generates with a chat template (`chat.rs`: the Jinja template of its
//! `tokenizer_config.json`, rendered with `minijinja`). Both wrap the
//! model their backend loaded, and show the server their text face
//! through [`Model::text`](wirespeed_core::Model::text).
//!
//! ```toml
//! backend = "onnx"                  # an encoder: input_ids, attention_mask
//! [embedding]                       #   (and token_type_ids) in, hidden states out
//! tokenizer = "tokenizer.json"      # the default
//! pooling = "mean"                  # mean | cls | last | none (the output is pooled already)
//! normalize = true                  # unit length, as OpenAI's embeddings; the default
//! max_length = 512                  # tokens a text is cut to; the tokenizer's own by default
//! dimensions = [64, 128]            # smaller sizes a request may ask (Matryoshka-trained models)
//!
//! backend = "python"                # a decoupled model that streams text_output
//! [chat]                            # optional when the folder has tokenizer_config.json
//! template = "tokenizer_config.json"   # its chat_template (or a .jinja file)
//! tokenizer = "tokenizer.json"      # counts usage; optional
//! ```

mod chat;
mod embedding;

use std::path::Path;
use std::sync::Arc;

use wirespeed_core::Model;

use wirespeed_backend::ModelConfig;

use chat::ChatKeys;
use embedding::EmbeddingKeys;

/// Wraps `model` (loaded from `files`, its version folder or its folder)
/// with the text face its config asks for: `[embedding]`, `[chat]`, or a
/// chat template found with a model that streams. A tokenizer's or
/// template's file is looked for in the version folder, then beside the
/// configuration in `folder`, where Triton's LLM repositories keep them.
pub fn wrap(
    model: Arc<dyn Model>,
    files: &Path,
    folder: &Path,
    config: &ModelConfig,
) -> Result<Arc<dyn Model>, String> {
    let files = |key: &str, name: &str| -> Result<std::path::PathBuf, String> {
        let in_version = config.file(files, key, name)?;
        if in_version.exists() || files == folder {
            return Ok(in_version);
        }
        let beside = config.file(folder, key, name)?;
        Ok(if beside.exists() { beside } else { in_version })
    };
    if let Some(table) = &config.embedding {
        if config.chat.is_some() {
            return Err(
                "a model is an embedder ([embedding]) or a chat model ([chat]), not both".into(),
            );
        }
        let keys: EmbeddingKeys = toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e| format!("[embedding]: {e}"))?;
        return Ok(Arc::new(embedding::Embedder::wrap(model, &keys, files)?));
    }
    match &config.chat {
        Some(table) => {
            let keys: ChatKeys = toml::Value::Table(table.clone())
                .try_into()
                .map_err(|e| format!("[chat]: {e}"))?;
            Ok(Arc::new(chat::Chat::wrap(model, &keys, files)?))
        }
        None if model.decoupled()
            && files("template", chat::TOKENIZER_CONFIG).is_ok_and(|p| p.is_file()) =>
        {
            match chat::Chat::wrap(model.clone(), &ChatKeys::default(), files) {
                Ok(chat) => Ok(Arc::new(chat)),
                Err(e) => {
                    tracing::warn!(folder = %folder.display(), error = %e, "the model's tokenizer_config.json gives no chat template; /v1/chat/completions will refuse this model");
                    Ok(model)
                }
            }
        }
        None => Ok(model),
    }
}

/// A Hugging Face tokenizer, from its `tokenizer.json`.
fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, String> {
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| format!("cannot read the tokenizer {}: {e}", path.display()))
}
