//! Triton's `reshape`: a tensor whose shape on the wire (`dims`) differs
//! from the model's own (`reshape.shape`), with the same elements. Clients
//! send and receive the wire shape; the model sees its own. The async
//! path moves the elements with their new shape; the sync one, which the
//! trait lends the inputs, copies the reshaped ones (a model with a
//! reshape pays that copy).
//!
//! [`Reshaped`] wraps the loaded model: its metadata is the wire shapes,
//! and each call's inputs are given the model's shapes before it runs and
//! its outputs the wire shapes after. With a batch dimension of Triton's
//! (`max_batch_size` above 0) both shapes follow it, and it passes through.

use std::sync::Arc;

use wirespeed_core::{
    Error, Execution, Heads, InferCall, InferFuture, Model, ModelMetadata, Tensor,
};

/// One tensor's two shapes, without the batch dimension.
#[derive(Debug, Clone)]
pub(crate) struct Reshape {
    pub(crate) name: String,
    /// On the wire (`dims`), `-1` for a variable dimension.
    pub(crate) wire: Vec<i64>,
    /// The model's (`reshape.shape`).
    pub(crate) model: Vec<i64>,
}

/// A model whose tensors are reshaped on the way in and out.
pub(crate) struct Reshaped {
    inner: Arc<dyn Model>,
    metadata: ModelMetadata,
    inputs: Vec<Option<Reshape>>,
    /// By the inner model's output index.
    outputs: Vec<Option<Reshape>>,
    batch: bool,
}

impl Reshaped {
    /// Wraps `inner` (loaded with the model's shapes): its metadata shows
    /// the wire shapes of the tensors in `reshapes`.
    pub(crate) fn wrap(inner: Arc<dyn Model>, reshapes: &[Reshape], batch: bool) -> Arc<dyn Model> {
        let find = |name: &str| reshapes.iter().find(|r| r.name == name).cloned();
        let mut metadata = inner.metadata().clone();
        let wire = |r: &Reshape| {
            let mut shape = if batch { vec![-1] } else { Vec::new() };
            shape.extend(&r.wire);
            shape
        };
        let inputs: Vec<Option<Reshape>> = metadata.inputs.iter().map(|s| find(&s.name)).collect();
        let outputs: Vec<Option<Reshape>> =
            metadata.outputs.iter().map(|s| find(&s.name)).collect();
        for (spec, r) in metadata.inputs.iter_mut().zip(&inputs) {
            if let Some(r) = r {
                spec.shape = wire(r);
            }
        }
        for (spec, r) in metadata.outputs.iter_mut().zip(&outputs) {
            if let Some(r) = r {
                spec.shape = wire(r);
            }
        }
        Arc::new(Reshaped {
            inner,
            metadata,
            inputs,
            outputs,
            batch,
        })
    }

    /// `shape` (a tensor's, batch first when there is one) as `to` says,
    /// `-1` in `to` taking what the element count leaves.
    fn reshaped(&self, shape: &[usize], to: &[i64], name: &str) -> Result<Vec<usize>, Error> {
        let (batch, rest) = match (self.batch, shape.split_first()) {
            (true, Some((&b, rest))) => (Some(b), rest),
            _ => (None, shape),
        };
        let count = product(rest.iter().copied());
        let known = product(to.iter().filter(|&&d| d >= 0).map(|&d| d as usize));
        let mut out: Vec<usize> = batch.into_iter().collect();
        for &d in to {
            out.push(if d >= 0 {
                d as usize
            } else {
                count
                    .zip(known)
                    .and_then(|(c, k)| c.checked_div(k))
                    .unwrap_or(0)
            });
        }
        let got = product(out.iter().skip(usize::from(batch.is_some())).copied());
        if got.is_none() || got != count {
            return Err(Error::invalid_input(format!(
                "'{name}' has shape {shape:?}, which cannot be reshaped to {to:?}"
            )));
        }
        Ok(out)
    }

    fn inputs_in(&self, inputs: Vec<Tensor>) -> Result<Vec<Tensor>, Error> {
        inputs
            .into_iter()
            .map(|mut t| {
                let index = self.metadata.inputs.iter().position(|s| s.name == t.name);
                if let Some(r) = index.and_then(|i| self.inputs[i].as_ref()) {
                    t.shape = self.reshaped(&t.shape, &r.model, &t.name)?;
                }
                Ok(t)
            })
            .collect()
    }

    fn outputs_out(&self, outputs: Vec<Tensor>, asked: &[usize]) -> Result<Vec<Tensor>, Error> {
        outputs
            .into_iter()
            .zip(asked)
            .map(|(mut t, &i)| {
                if let Some(r) = &self.outputs[i] {
                    t.shape = self.reshaped(&t.shape, &r.wire, &t.name)?;
                }
                Ok(t)
            })
            .collect()
    }
}

/// The product of `dims`, or `None` past `usize`.
fn product(mut dims: impl Iterator<Item = usize>) -> Option<usize> {
    dims.try_fold(1usize, |all, d| all.checked_mul(d))
}

impl Model for Reshaped {
    fn metadata(&self) -> &ModelMetadata {
        &self.metadata
    }

    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        let inputs = self.inputs_in(inputs.to_vec())?;
        let answered = self.inner.infer(&inputs, outputs)?;
        self.outputs_out(answered, outputs)
    }

    fn infer_async(self: Arc<Self>, mut call: InferCall) -> InferFuture {
        let asked = call.outputs.clone();
        match self.inputs_in(std::mem::take(&mut call.inputs)) {
            Ok(inputs) => call.inputs = inputs,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        }
        let inner = Arc::clone(&self.inner).infer_async(call);
        Box::pin(async move { self.outputs_out(inner.await?, &asked) })
    }

    fn heads(&self) -> Heads {
        self.inner.heads()
    }

    fn ready(&self) -> Result<(), String> {
        self.inner.ready()
    }

    fn instances(&self) -> Option<usize> {
        self.inner.instances()
    }

    fn default_concurrency(&self) -> Option<usize> {
        self.inner.default_concurrency()
    }

    fn execution(&self, elements: usize) -> Execution {
        self.inner.execution(elements)
    }

    fn class_labels(&self) -> Vec<(String, Vec<String>)> {
        self.inner.class_labels()
    }
}
