//! An encoder made an embedder: texts in, one vector each out. The
//! texts are tokenized with the model's Hugging Face `tokenizer.json` (the
//! `tokenizers` crate, the library behind the Python package), padded to
//! the batch's longest and cut at `max_length`; the encoder runs on the
//! ids and masks; its hidden states are pooled (the mean over the real
//! tokens, the first token's, or the last real token's) and scaled to unit
//! length. The embedder is a model of its own: `text` (BYTES, one per row)
//! in, `embedding` (FP32 `[rows, size]`) and `tokens` (INT64, each text's
//! token count, for usage) out, batched by the scheduler like any model,
//! and asked through V2 as well as OpenAI's `/v1/embeddings`.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};
use wirespeed_core::{
    DataType, Error, Execution, Model, ModelMetadata, Tensor, TensorData, TensorSpec, TextModel,
};

/// `[embedding]`, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbeddingKeys {
    #[serde(default)]
    tokenizer: Option<String>,
    #[serde(default)]
    pooling: Option<String>,
    #[serde(default)]
    normalize: Option<bool>,
    #[serde(default)]
    max_length: Option<usize>,
    #[serde(default)]
    dimensions: Vec<usize>,
    /// The encoder's output holding the hidden states; its first by
    /// default.
    #[serde(default)]
    output: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
    Last,
    /// The encoder pools itself (`sentence_embedding [rows, size]`).
    None,
}

/// The embedder: the tokenizer, the encoder and the pooling.
pub(crate) struct Embedder {
    encoder: Arc<dyn Model>,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    sizes: Vec<usize>,
    pad_id: u32,
    pad_type_id: u32,
    /// A few texts are embedded on the calling thread (measured at load).
    inline: bool,
    /// The encoder's output used, by index.
    output: usize,
    /// The encoder's inputs, in its order: what each one takes.
    feeds: Vec<(Feed, DataType)>,
    metadata: ModelMetadata,
}

/// An encoder that embeds one short text in less than this embeds up to
/// [`SEQUENTIAL_TEXTS`] texts on the thread that read the request.
const INLINE_UNDER: std::time::Duration = std::time::Duration::from_micros(50);

/// Texts up to this many are tokenized one after another; more over
/// the tokenizer's threads (their hand-off costs more than a few texts).
const SEQUENTIAL_TEXTS: usize = 4;

/// A batch of texts as the encoder takes it.
struct Encoded {
    tensors: Vec<Tensor>,
    /// Each text's attention mask, padded.
    masks: Vec<Vec<u32>>,
    /// Each text's tokens.
    counts: Vec<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    Ids,
    Mask,
    TypeIds,
}

impl Embedder {
    pub(crate) fn wrap(
        encoder: Arc<dyn Model>,
        keys: &EmbeddingKeys,
        files: impl Fn(&str, &str) -> Result<PathBuf, String>,
    ) -> Result<Embedder, String> {
        let path = files(
            "tokenizer",
            keys.tokenizer.as_deref().unwrap_or("tokenizer.json"),
        )?;
        let mut tokenizer = super::load_tokenizer(&path)?;
        let pooling = match keys.pooling.as_deref().unwrap_or("mean") {
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "last" => Pooling::Last,
            "none" => Pooling::None,
            other => {
                return Err(format!(
                    "[embedding] pooling '{other}': choose mean, cls, last or none"
                ))
            }
        };
        let inner = encoder.metadata();
        let mut feeds = Vec::with_capacity(inner.inputs.len());
        for spec in &inner.inputs {
            let feed = match spec.name.as_str() {
                "input_ids" => Feed::Ids,
                "attention_mask" => Feed::Mask,
                "token_type_ids" => Feed::TypeIds,
                other => {
                    return Err(format!(
                        "the encoder's input '{other}' is none of input_ids, attention_mask and \
                         token_type_ids, which an embedder feeds"
                    ))
                }
            };
            if !matches!(spec.datatype, DataType::Int64 | DataType::Int32) {
                return Err(format!(
                    "the encoder's input '{}' is {}; an embedder feeds INT64 or INT32 ids",
                    spec.name, spec.datatype
                ));
            }
            feeds.push((feed, spec.datatype));
        }
        if !feeds.iter().any(|(f, _)| *f == Feed::Ids) {
            return Err("the encoder has no input_ids input".into());
        }
        let output = match &keys.output {
            Some(name) => inner
                .outputs
                .iter()
                .position(|o| &o.name == name)
                .ok_or_else(|| format!("[embedding] output '{name}': the encoder has none"))?,
            None if inner.outputs.is_empty() => return Err("the encoder has no output".into()),
            None => 0,
        };
        let spec = &inner.outputs[output];
        if spec.datatype != DataType::Fp32 {
            return Err(format!(
                "the encoder's output '{}' is {}; an embedder pools FP32",
                spec.name, spec.datatype
            ));
        }
        let rank = if pooling == Pooling::None { 2 } else { 3 };
        if !spec.shape.is_empty() && spec.shape.len() != rank {
            return Err(format!(
                "the encoder's output '{}' has shape {:?}; pooling '{}' takes {rank} dimensions \
                 (rows{}, size)",
                spec.name,
                spec.shape,
                keys.pooling.as_deref().unwrap_or("mean"),
                if rank == 3 { ", tokens" } else { "" }
            ));
        }
        let size = spec.shape.last().copied().unwrap_or(-1);
        if let Some(&bad) = keys
            .dimensions
            .iter()
            .find(|&&d| d == 0 || (size > 0 && d as i64 >= size))
        {
            return Err(format!(
                "[embedding] dimensions has {bad}; the sizes a request may ask are smaller than \
                 the model's {size} and above 0"
            ));
        }
        // Padded here, to the batch's longest, with the tokenizer's own
        // pad token when it names one.
        let (pad_id, pad_type_id) = match tokenizer.get_padding() {
            Some(p) => (p.pad_id, p.pad_type_id),
            None => ["[PAD]", "<pad>", "<|pad|>"]
                .iter()
                .find_map(|t| tokenizer.token_to_id(t))
                .map_or((0, 0), |id| (id, 0)),
        };
        tokenizer.with_padding(None);
        if let Some(max) = keys.max_length {
            let truncation = TruncationParams {
                max_length: max,
                ..tokenizer.get_truncation().cloned().unwrap_or_default()
            };
            tokenizer
                .with_truncation(Some(truncation))
                .map_err(|e| format!("[embedding] max_length {max}: {e}"))?;
        }
        let metadata = ModelMetadata {
            name: inner.name.clone(),
            versions: inner.versions.clone(),
            platform: format!("{}_embedding", inner.platform),
            inputs: vec![TensorSpec {
                name: "text".into(),
                datatype: DataType::Bytes,
                shape: vec![-1],
                optional: false,
            }],
            outputs: vec![
                TensorSpec {
                    name: "embedding".into(),
                    datatype: DataType::Fp32,
                    shape: vec![-1, size],
                    optional: false,
                },
                TensorSpec {
                    name: "tokens".into(),
                    datatype: DataType::Int64,
                    shape: vec![-1],
                    optional: false,
                },
            ],
        };
        let mut embedder = Embedder {
            encoder,
            tokenizer,
            pooling,
            normalize: keys.normalize.unwrap_or(true),
            sizes: keys.dimensions.clone(),
            pad_id,
            pad_type_id,
            output,
            feeds,
            metadata,
            inline: false,
        };
        // A small encoder answers a few texts faster on the thread that
        // read them than through a hand-off to the CPU pool; a large one
        // must not hold that thread. Measured here, on one short text.
        let probe = Tensor {
            name: "text".into(),
            shape: vec![1],
            data: TensorData::Bytes(vec![b"a short text to time the encoder".to_vec()]),
            parameters: Vec::new(),
        };
        let mut took = std::time::Duration::MAX;
        for _ in 0..3 {
            let started = std::time::Instant::now();
            embedder
                .infer(std::slice::from_ref(&probe), &[0, 1])
                .map_err(|e| format!("the embedder fails on a short text: {e}"))?;
            took = took.min(started.elapsed());
        }
        embedder.inline = took < INLINE_UNDER;
        tracing::info!(
            model = %embedder.metadata.name,
            one_text_us = took.as_micros() as u64,
            inline = embedder.inline,
            "embedder"
        );
        Ok(embedder)
    }

    /// The encoder's inputs for `texts` (padded to the longest), each
    /// text's attention mask (padded) and token count.
    fn encode(&self, texts: &[&str]) -> Result<Encoded, Error> {
        let failed =
            |e: tokenizers::Error| Error::invalid_input(format!("cannot tokenize the text: {e}"));
        // A few texts one after another; more over the tokenizer's threads.
        let encodings = if texts.len() <= SEQUENTIAL_TEXTS {
            texts
                .iter()
                .map(|t| self.tokenizer.encode(*t, true))
                .collect::<Result<Vec<_>, _>>()
                .map_err(failed)?
        } else {
            self.tokenizer
                .encode_batch(texts.to_vec(), true)
                .map_err(failed)?
        };
        let rows = encodings.len();
        let width = encodings
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0);
        let mut masks = Vec::with_capacity(rows);
        let mut counts = Vec::with_capacity(rows);
        for e in &encodings {
            let mut mask = e.get_attention_mask().to_vec();
            counts.push(mask.iter().map(|&m| i64::from(m)).sum());
            mask.resize(width, 0);
            masks.push(mask);
        }
        let inner = self.encoder.metadata();
        let tensors = self
            .feeds
            .iter()
            .zip(&inner.inputs)
            .map(|((feed, datatype), spec)| {
                let pad = match feed {
                    Feed::Ids => self.pad_id,
                    Feed::Mask => 0,
                    Feed::TypeIds => self.pad_type_id,
                };
                let mut values: Vec<i64> = Vec::with_capacity(rows * width);
                for e in &encodings {
                    let row = match feed {
                        Feed::Ids => e.get_ids(),
                        Feed::Mask => e.get_attention_mask(),
                        Feed::TypeIds => e.get_type_ids(),
                    };
                    values.extend(row.iter().map(|&v| i64::from(v)));
                    values.resize(values.len() + width - row.len(), i64::from(pad));
                }
                let data = match datatype {
                    DataType::Int32 => {
                        TensorData::Int32(values.into_iter().map(|v| v as i32).collect())
                    }
                    _ => TensorData::Int64(values),
                };
                Tensor {
                    name: spec.name.clone(),
                    shape: vec![rows, width],
                    data,
                    parameters: Vec::new(),
                }
            })
            .collect();
        Ok(Encoded {
            tensors,
            masks,
            counts,
        })
    }

    /// One vector per row from the encoder's `hidden` states.
    fn pool(&self, hidden: Tensor, masks: &[Vec<u32>]) -> Result<(Vec<f32>, usize), Error> {
        let TensorData::Fp32(values) = hidden.data else {
            return Err(Error::model_failed(
                "the encoder's hidden states are not FP32",
            ));
        };
        let rows = masks.len();
        if values.len() != wirespeed_core::element_count(&hidden.shape).unwrap_or(usize::MAX) {
            return Err(Error::model_failed(format!(
                "the encoder answered {} values for shape {:?}",
                values.len(),
                hidden.shape
            )));
        }
        let (size, out) = match (self.pooling, hidden.shape.as_slice()) {
            (Pooling::None, &[r, size]) if r == rows => (size, values),
            (Pooling::None, shape) => {
                return Err(Error::model_failed(format!(
                    "the encoder answered shape {shape:?} for {rows} texts; pooling 'none' takes \
                     [rows, size]"
                )))
            }
            (_, &[r, 0, _]) if r == rows && rows > 0 => {
                return Err(Error::invalid_input(
                    "the texts made no tokens for the encoder to embed",
                ))
            }
            (pooling, &[r, tokens, size]) if r == rows => {
                let mut out = vec![0f32; rows * size];
                for (row, mask) in masks.iter().enumerate() {
                    let at = |t: usize| &values[(row * tokens + t) * size..][..size];
                    let target = &mut out[row * size..][..size];
                    match pooling {
                        Pooling::Cls => target.copy_from_slice(at(0)),
                        Pooling::Last => {
                            let last = mask.iter().rposition(|&m| m != 0).unwrap_or(0);
                            target.copy_from_slice(at(last.min(tokens - 1)));
                        }
                        _ => {
                            let mut n = 0f32;
                            for (t, &m) in mask.iter().enumerate().take(tokens) {
                                if m != 0 {
                                    n += 1.0;
                                    for (o, v) in target.iter_mut().zip(at(t)) {
                                        *o += v;
                                    }
                                }
                            }
                            let n = n.max(1e-9);
                            target.iter_mut().for_each(|o| *o /= n);
                        }
                    }
                }
                (size, out)
            }
            (_, shape) => {
                return Err(Error::model_failed(format!(
                    "the encoder answered shape {shape:?} for {rows} texts; pooling takes \
                     [rows, tokens, size]"
                )))
            }
        };
        let mut out = out;
        if self.normalize {
            for row in out.chunks_mut(size.max(1)) {
                let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                row.iter_mut().for_each(|v| *v /= norm);
            }
        }
        Ok((out, size))
    }
}

impl Model for Embedder {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        let TensorData::Bytes(items) = &inputs[0].data else {
            return Err(Error::invalid_input("'text' is BYTES"));
        };
        let texts = items
            .iter()
            .map(|b| std::str::from_utf8(b))
            .collect::<Result<Vec<&str>, _>>()
            .map_err(|_| Error::invalid_input("a text is not UTF-8"))?;
        let rows = texts.len();
        let Encoded {
            tensors: feeds,
            masks,
            counts,
        } = self.encode(&texts)?;
        let hidden = self.encoder.infer(&feeds, &[self.output])?;
        let hidden = hidden
            .into_iter()
            .next()
            .ok_or_else(|| Error::model_failed("the encoder gave no output"))?;
        let (vectors, size) = self.pool(hidden, &masks)?;
        // Each output is asked at most once: moved into the answer.
        let (mut vectors, mut counts) = (Some(vectors), Some(counts));
        Ok(outputs
            .iter()
            .map(|&i| match i {
                0 => Tensor {
                    name: "embedding".into(),
                    shape: vec![rows, size],
                    data: TensorData::Fp32(vectors.take().unwrap_or_default()),
                    parameters: Vec::new(),
                },
                _ => Tensor {
                    name: "tokens".into(),
                    shape: vec![rows],
                    data: TensorData::Int64(counts.take().unwrap_or_default()),
                    parameters: Vec::new(),
                },
            })
            .collect())
    }

    /// On the CPU pool, but for a few texts to a small encoder (measured
    /// at load): those inline.
    fn execution(&self, texts: usize) -> Execution {
        if self.inline && texts <= SEQUENTIAL_TEXTS {
            Execution::Inline
        } else {
            Execution::Pool
        }
    }

    fn ready(&self) -> Result<(), String> {
        self.encoder.ready()
    }

    fn text(&self) -> Option<&dyn TextModel> {
        Some(self)
    }
}

impl TextModel for Embedder {
    fn embeds(&self) -> bool {
        true
    }

    fn embedding_sizes(&self) -> &[usize] {
        &self.sizes
    }

    fn count_tokens(&self, text: &str) -> Option<usize> {
        self.tokenizer
            .encode(text, true)
            .ok()
            .map(|e| e.get_attention_mask().iter().filter(|&&m| m != 0).count())
    }
}
