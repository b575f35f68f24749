//! What a model declares about itself, and the trait every backend implements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{DataType, Error, Parameters, Tensor, TraceContext};

/// The name, datatype and shape of one input or output, as model metadata
/// reports it. A dimension of `-1` takes any size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name.
    pub name: String,
    /// Its element type.
    pub datatype: DataType,
    /// Its dimensions; `-1` for a variable one.
    pub shape: Vec<i64>,
    /// Triton's optional input: a request may leave it out.
    pub optional: bool,
}

impl TensorSpec {
    /// Whether a concrete `shape` fits this spec.
    pub fn accepts_shape(&self, shape: &[usize]) -> bool {
        self.shape.len() == shape.len()
            && self
                .shape
                .iter()
                .zip(shape)
                .all(|(&want, &got)| want < 0 || want as u64 == got as u64)
    }

    /// The spec's shape as the protocol prints it, e.g. `[-1, 12]`.
    pub fn shape_display(&self) -> String {
        format_shape(&self.shape)
    }
}

/// Formats a shape as Triton's errors write it: `[-1,3]`.
fn compact_shape<T: std::fmt::Display>(shape: &[T]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(","))
}

/// Formats a shape the way the protocol writes it: `[2, 3]`.
pub fn format_shape<T: std::fmt::Display>(shape: &[T]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

/// What a model's outputs mean beyond their tensors, as a TensorFlow
/// estimator's heads say it: the answers to TF Serving's `:classify` and
/// `:regress`. A binary classifier has both (its regression value is the
/// probability of class 1, as TF's binary heads export it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Heads {
    /// The output holding each row's classes, and how.
    pub classification: Option<ClassificationHead>,
    /// The output holding each row's one regression value, shaped `[n]`.
    pub regression: Option<usize>,
}

/// A model's classification output: an index into its metadata's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassificationHead {
    /// The output.
    pub output: usize,
    /// What its values are.
    pub scores: ClassScores,
}

/// How a classification output holds a row's classes, labelled `"0"`,
/// `"1"`, ... as TF's heads label classes without a vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassScores {
    /// `[n]`: the probability of class 1 of two; class 0 scores `1 - p`.
    Positive,
    /// `[n, classes]`: each class's probability.
    Probabilities {
        /// The number of classes.
        classes: usize,
    },
    /// `[n]`: the index of the one class predicted, with no score (TF's
    /// classification signature with `classes` and no `scores`).
    Index,
}

/// A model's metadata, as `GET /v2/models/{name}` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelMetadata {
    /// The model's name in the repository.
    pub name: String,
    /// The versions served.
    pub versions: Vec<String>,
    /// The framework, e.g. `xgboost_json`.
    pub platform: String,
    /// The inputs the model takes, each required unless optional.
    pub inputs: Vec<TensorSpec>,
    /// The outputs the model can produce.
    pub outputs: Vec<TensorSpec>,
}

impl ModelMetadata {
    /// Checks request inputs against the declared ones: every declared input
    /// present once, no unknown name, the right datatype, a fitting shape.
    /// The errors are the real Triton's, word for word (what Triton's own
    /// tests and its users' clients match), checked in its order: the
    /// number of inputs, each name, the required ones, then each datatype
    /// and shape.
    pub fn check_inputs(&self, inputs: &[Tensor]) -> Result<(), Error> {
        let required = self.inputs.iter().filter(|s| !s.optional).count();
        let missing = || -> Vec<&str> {
            self.inputs
                .iter()
                .filter(|s| !s.optional && !inputs.iter().any(|t| t.name == s.name))
                .map(|s| s.name.as_str())
                .collect()
        };
        if inputs.len() < required || inputs.len() > self.inputs.len() {
            return Err(self.wrong_inputs(inputs, required, &missing()));
        }
        for (i, input) in inputs.iter().enumerate() {
            if !self.inputs.iter().any(|s| s.name == input.name) {
                return Err(Error::invalid_input(format!(
                    "unexpected inference input '{}' for model '{}'",
                    input.name, self.name
                )));
            }
            if inputs[..i].iter().any(|earlier| earlier.name == input.name) {
                return Err(Error::invalid_input(format!(
                    "input '{}' already exists in request",
                    input.name
                )));
            }
        }
        let missing = missing();
        if !missing.is_empty() {
            return Err(self.wrong_inputs(inputs, required, &missing));
        }
        for input in inputs {
            let Some(spec) = self.inputs.iter().find(|s| s.name == input.name) else {
                continue;
            };
            if input.datatype() != spec.datatype {
                return Err(Error::invalid_input(format!(
                    "inference input '{}' data-type is '{}', but model '{}' expects '{}'",
                    input.name,
                    input.datatype(),
                    self.name,
                    spec.datatype
                )));
            }
            if !spec.accepts_shape(&input.shape) {
                return Err(Error::invalid_input(format!(
                    "unexpected shape for input '{}' for model '{}'. Expected {}, got {}. ",
                    input.name,
                    self.name,
                    compact_shape(&spec.shape),
                    compact_shape(&input.shape)
                )));
            }
        }
        Ok(())
    }

    /// Triton's error for a request without the inputs the model needs.
    fn wrong_inputs(&self, inputs: &[Tensor], required: usize, missing: &[&str]) -> Error {
        let expected = if required == self.inputs.len() {
            format!("expected {required} inputs")
        } else {
            format!(
                "expected number of inputs between {required} and {}",
                self.inputs.len()
            )
        };
        let names = |names: &mut dyn Iterator<Item = &str>| -> String {
            let quoted: Vec<String> = names.map(|n| format!("'{n}'")).collect();
            format!("[{}]", quoted.join(","))
        };
        Error::invalid_input(format!(
            "{expected} but got {} inputs for model '{}'. Got input(s) {}, but missing required \
             input(s) {}. Please provide all required input(s).",
            inputs.len(),
            self.name,
            names(&mut inputs.iter().map(|t| t.name.as_str())),
            names(&mut missing.iter().copied()),
        ))
    }

    /// Resolves requested output names to indices into `outputs`; no names
    /// means every output, in declaration order.
    pub fn resolve_outputs<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<Vec<usize>, Error> {
        let mut indices = Vec::new();
        for name in names {
            let Some(index) = self.outputs.iter().position(|s| s.name == name) else {
                return Err(Error::invalid_input(format!(
                    "unexpected inference output '{}' for model '{}'",
                    name, self.name
                )));
            };
            if indices.contains(&index) {
                return Err(Error::invalid_input(format!(
                    "output '{name}' is requested more than once"
                )));
            }
            indices.push(index);
        }
        if indices.is_empty() {
            indices.extend(0..self.outputs.len());
        }
        Ok(indices)
    }
}

/// How a request's tensors meet the ones a model declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Binding {
    /// By name, as Triton and TF Serving bind them: every input is a
    /// declared one, of its datatype and shape; the outputs asked for are
    /// declared ones, and a request that names none gets them all.
    #[default]
    Declared,
    /// As MLServer's and KServe's runtimes read a request: its one input is
    /// the model's one input whatever its name, its numbers cast to the
    /// declared datatype as numpy casts them (`astype`); a request that
    /// names no outputs gets the first declared one alone (`predict`).
    FirstInput,
    /// Nothing declared binds (MLServer's custom runtimes, KServe's custom
    /// predictors): any inputs reach the model, which answers the outputs
    /// it produces; a request that names some gets those.
    Open,
}

impl ModelMetadata {
    /// Binds a request to the model: its inputs checked (and, under
    /// [`Binding::FirstInput`], renamed and cast), and the indices of the
    /// outputs to compute. Under [`Binding::Open`] the indices are empty
    /// unless every name asked for is declared: the model answers what it
    /// produces, and [`Binding::pick`] keeps what was asked.
    pub fn bind(
        &self,
        binding: Binding,
        inputs: &mut [Tensor],
        requested: &[&str],
    ) -> Result<Vec<usize>, Error> {
        match binding {
            Binding::Declared => {
                self.check_inputs(inputs)?;
                self.resolve_outputs(requested.iter().copied())
            }
            Binding::FirstInput => {
                if let ([input], [spec]) = (&mut *inputs, self.inputs.as_slice()) {
                    input.name.clone_from(&spec.name);
                    if input.datatype() != spec.datatype {
                        if let Some(data) = input.data.cast_number(spec.datatype) {
                            input.data = data;
                        }
                    }
                } else if self.inputs.len() == 1 {
                    return Err(Error::invalid_input(format!(
                        "model '{}' takes one input, and the request gives {}",
                        self.name,
                        inputs.len()
                    )));
                }
                self.check_inputs(inputs)?;
                let mut outputs = self.resolve_outputs(requested.iter().copied())?;
                if requested.is_empty() {
                    outputs.truncate(1);
                }
                Ok(outputs)
            }
            Binding::Open => {
                for (i, input) in inputs.iter().enumerate() {
                    if inputs[..i].iter().any(|earlier| earlier.name == input.name) {
                        return Err(Error::invalid_input(format!(
                            "input '{}' already exists in request",
                            input.name
                        )));
                    }
                }
                let declared = requested
                    .iter()
                    .all(|name| self.outputs.iter().any(|s| s.name == *name));
                if requested.is_empty() || !declared {
                    Ok(Vec::new())
                } else {
                    self.resolve_outputs(requested.iter().copied())
                }
            }
        }
    }
}

impl Binding {
    /// The outputs a model answered, as the request asked for them: under
    /// [`Binding::Open`] those named, in the order named (all of them when
    /// none is); the others' answers are already what was asked.
    pub fn pick(
        self,
        model: &str,
        produced: Vec<Tensor>,
        requested: &[&str],
    ) -> Result<Vec<Tensor>, Error> {
        if self != Binding::Open || requested.is_empty() {
            return Ok(produced);
        }
        let mut produced: Vec<Option<Tensor>> = produced.into_iter().map(Some).collect();
        let mut picked = Vec::with_capacity(requested.len());
        for name in requested {
            let found = produced
                .iter_mut()
                .find(|t| t.as_ref().is_some_and(|t| t.name == *name))
                .and_then(Option::take);
            match found {
                Some(tensor) => picked.push(tensor),
                None => {
                    let made: Vec<&str> = produced
                        .iter()
                        .flatten()
                        .map(|t| t.name.as_str())
                        .chain(picked.iter().map(|t: &Tensor| t.name.as_str()))
                        .collect();
                    return Err(Error::invalid_input(format!(
                        "output '{name}' is requested from model '{model}', which answered {}",
                        if made.is_empty() {
                            "no outputs".to_owned()
                        } else {
                            quoted_list(&made)
                        }
                    )));
                }
            }
        }
        Ok(picked)
    }
}

fn quoted_list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    quoted.join(", ")
}

/// Where a request's compute runs, as a model chooses for each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Execution {
    /// On the async worker that read the request: for work well under a
    /// millisecond, where a hop to another thread would cost more.
    Inline,
    /// On the server's CPU pool, through [`Model::infer`]: CPU-bound work
    /// long enough to stall other connections if it ran inline.
    Pool,
    /// Through [`Model::infer_async`], awaited on the async runtime: a
    /// model that waits rather than computes (a network call, another
    /// process), so it holds no thread while it waits.
    Async,
}

/// The future [`Model::infer_async`] returns.
pub type InferFuture = Pin<Box<dyn Future<Output = Result<Vec<Tensor>, Error>> + Send>>;

/// One request as a model that awaits receives it: the inputs, the outputs
/// to produce, and what else of the request reaches a model.
#[derive(Debug)]
pub struct InferCall {
    /// The inputs, checked against the metadata.
    pub inputs: Vec<Tensor>,
    /// Indices into `metadata().outputs`, in the order the result follows.
    pub outputs: Vec<usize>,
    /// The request's own parameters, those the server does not act on
    /// itself (a model behind another server passes them on).
    pub parameters: Parameters,
    /// When the client stops waiting: its `grpc-timeout`, or the server's
    /// request timeout. The future is dropped then in any case.
    pub deadline: Option<Instant>,
    /// The request's W3C trace context, for a model that calls another
    /// server to pass on.
    pub trace: Option<TraceContext>,
    /// The inputs' own parameters (a content type), by input name, for a
    /// model that reads them (MLServer's and KServe's runtimes).
    pub input_parameters: Vec<(String, Parameters)>,
    /// Where a model that streams ([`Model::decoupled`]) sends its
    /// responses; `None` for the others. Such a model's future answers
    /// no outputs: it ends when the model has taken the request (Triton's
    /// `execute` returned), and the stream goes on until every sender is
    /// dropped.
    pub responses: Option<crate::ResponseSender>,
}

/// A loaded model that can run inference.
///
/// Implementations are shared across requests and threads. The server asks
/// [`execution`](Model::execution) where each request runs, then calls
/// [`infer`](Model::infer) (inline or on its CPU pool) or
/// [`infer_async`](Model::infer_async). A model that computes on the
/// server's threads implements `infer`; one that waits on something (a
/// worker process, another server) implements `infer_async` and says so in
/// its `execution`. A model that answers through other models is a
/// composite (`wirespeed-backend`'s `Composite`), which the server runs
/// through its own `run`, and implements neither.
pub trait Model: Send + Sync {
    /// What the model takes and produces.
    fn metadata(&self) -> &ModelMetadata;

    /// Runs the model on the calling thread. `inputs` have passed
    /// [`ModelMetadata::check_inputs`]; `outputs` are indices into
    /// `metadata().outputs`, in the order the result must follow. By
    /// default, an internal error: a model that runs only through
    /// [`infer_async`](Model::infer_async), or a composite, is never
    /// asked this way.
    fn infer(&self, inputs: &[Tensor], outputs: &[usize]) -> Result<Vec<Tensor>, Error> {
        let _ = (inputs, outputs);
        Err(Error::internal(format!(
            "model '{}' does not compute on the server's threads",
            self.metadata().name
        )))
    }

    /// Runs the model without holding a thread while it waits: the entry
    /// point of models whose [`execution`](Model::execution) is
    /// [`Execution::Async`]. By default, [`infer`](Model::infer), ready at
    /// once. The server drops the future when the caller goes (a client
    /// that disconnects, a deadline that passes), so whatever it awaits is
    /// cancelled with it.
    fn infer_async(self: Arc<Self>, call: InferCall) -> InferFuture {
        Box::pin(std::future::ready(self.infer(&call.inputs, &call.outputs)))
    }

    /// The metadata the model's own server answers for it, as JSON, when
    /// a client of that server reads something else than wirespeed's
    /// (an MLServer runtime's `metadata()`, from its settings and what
    /// its `load` put there). None by default: wirespeed's metadata.
    fn metadata_answer(&self) -> Option<&str> {
        None
    }

    /// What the model's outputs mean, for TF Serving's `:classify` and
    /// `:regress`. None by default: such a model answers `:predict` only.
    fn heads(&self) -> Heads {
        Heads::default()
    }

    /// Class labels the model itself gives an output (a converted
    /// classifier's), by output: the classification extension names the
    /// classes with them. None by default; a config's labels file wins.
    fn class_labels(&self) -> Vec<(String, Vec<String>)> {
        Vec::new()
    }

    /// The model's text face for the OpenAI API (an embedder, a chat
    /// template, a tokenizer). `None` by default.
    fn text(&self) -> Option<&dyn crate::TextModel> {
        None
    }

    /// How a request's tensors meet the declared ones: by name unless the
    /// model says otherwise (MLServer's and KServe's runtimes).
    fn binding(&self) -> Binding {
        Binding::Declared
    }

    /// Whether the model answers a request with a stream of responses
    /// (Triton's decoupled transaction policy) rather than once: it is
    /// then called through [`infer_async`](Model::infer_async) with a
    /// [`ResponseSender`](crate::ResponseSender) in the call. False by
    /// default.
    fn decoupled(&self) -> bool {
        false
    }

    /// Whether the model can answer now, or why not: a model behind
    /// another server is not ready while that server does not answer.
    /// Requests to a model that is not ready get 503 (UNAVAILABLE) with the
    /// reason, and its readiness endpoints say false. Always ready by
    /// default.
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }

    /// The executions of a model that gathers its batches itself, which
    /// only it sees (the statistics' `execution_count` and `batch_stats`).
    fn executions(&self) -> Option<&Executions> {
        None
    }

    /// The model gathers a batch's requests itself and takes them apart
    /// (Triton's Python backend: `execute` gets a list of requests, not
    /// one joined request): the scheduler hands them over one by one, and
    /// does not join them.
    fn batches_itself(&self) -> bool {
        false
    }

    /// The instances that compute the model (Triton's instance group
    /// count), for a model made of several (a Python model's workers);
    /// `None` for one that computes on the server's threads.
    fn instances(&self) -> Option<usize> {
        None
    }

    /// Requests computed at once when the config sets no
    /// `max_concurrency`. `None`, the default, means the CPU pool's
    /// threads: right for a model that computes. A model that waits on
    /// another server says how many calls it keeps in flight.
    fn default_concurrency(&self) -> Option<usize> {
        None
    }

    /// Where a request of `elements` input elements runs. By default:
    /// inline below 16 Ki elements (a tree ensemble's row takes well under
    /// a microsecond), on the CPU pool above.
    fn execution(&self, elements: usize) -> Execution {
        if elements < 16 * 1024 {
            Execution::Inline
        } else {
            Execution::Pool
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TensorData;

    fn titanic() -> ModelMetadata {
        let spec = |name: &str, shape: Vec<i64>| TensorSpec {
            optional: false,
            name: name.into(),
            datatype: DataType::Fp32,
            shape,
        };
        ModelMetadata {
            name: "titanic".into(),
            versions: vec!["1".into()],
            platform: "xgboost_json".into(),
            inputs: vec![spec("features", vec![-1, 12])],
            outputs: vec![spec("probability", vec![-1]), spec("margin", vec![-1])],
        }
    }

    /// A model that waits on something implements `infer_async` alone: a
    /// call on the server's threads is an internal error naming it, never
    /// a panic.
    #[test]
    fn a_model_without_infer_says_it_computes_elsewhere() {
        struct Elsewhere(ModelMetadata);
        impl Model for Elsewhere {
            fn metadata(&self) -> &ModelMetadata {
                &self.0
            }
        }
        let e = Elsewhere(titanic()).infer(&[], &[0]).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Internal);
        assert!(e.message().contains("model 'titanic'"), "{e}");
    }

    #[test]
    fn the_first_input_binds_whatever_its_name_and_answers_the_first_output() {
        let m = titanic();
        let mut inputs = vec![Tensor {
            name: "predict".into(),
            shape: vec![1, 12],
            data: TensorData::Int64(vec![1; 12]),
            parameters: Vec::new(),
        }];
        let outputs = m.bind(Binding::FirstInput, &mut inputs, &[]).unwrap();
        assert_eq!(outputs, vec![0]);
        assert_eq!(inputs[0].name, "features");
        assert_eq!(inputs[0].data, TensorData::Fp32(vec![1.0; 12]));
        let outputs = m
            .bind(Binding::FirstInput, &mut inputs, &["margin", "probability"])
            .unwrap();
        assert_eq!(outputs, vec![1, 0]);
        let mut two = vec![inputs[0].clone(), inputs[0].clone()];
        let e = m.bind(Binding::FirstInput, &mut two, &[]).unwrap_err();
        assert!(e.to_string().contains("takes one input"), "{e}");
    }

    #[test]
    fn an_open_model_takes_anything_and_answers_what_was_asked() {
        let m = titanic();
        let t = |name: &str| Tensor {
            name: name.into(),
            shape: vec![1],
            data: TensorData::Fp32(vec![1.0]),
            parameters: Vec::new(),
        };
        let mut inputs = vec![t("a"), t("b")];
        assert_eq!(
            m.bind(Binding::Open, &mut inputs, &["score"]).unwrap(),
            Vec::<usize>::new()
        );
        let mut twice = vec![t("a"), t("a")];
        assert!(m.bind(Binding::Open, &mut twice, &[]).is_err());
        let picked = Binding::Open
            .pick("m", vec![t("x"), t("score")], &["score"])
            .unwrap();
        assert_eq!(picked, vec![t("score")]);
        let e = Binding::Open
            .pick("m", vec![t("x")], &["score"])
            .unwrap_err();
        assert!(e.to_string().contains("which answered 'x'"), "{e}");
        // Not open: the answer is already what was asked.
        assert_eq!(
            Binding::Declared
                .pick("m", vec![t("x")], &["score"])
                .unwrap(),
            vec![t("x")]
        );
    }

    fn features(shape: Vec<usize>, data: TensorData) -> Tensor {
        Tensor {
            name: "features".into(),
            shape,
            data,
            parameters: Vec::new(),
        }
    }

    #[test]
    fn a_fitting_input_passes() {
        let t = features(vec![2, 12], TensorData::Fp32(vec![0.0; 24]));
        assert_eq!(titanic().check_inputs(&[t]), Ok(()));
    }

    /// Triton 2.51's own texts for the same mistakes (read from the real
    /// server: tests/test_triton_peer_python.py compares them live).
    #[test]
    fn mismatches_are_named_in_tritons_words() {
        let m = titanic();
        let error = |inputs: &[Tensor]| m.check_inputs(inputs).unwrap_err().to_string();
        let wrong_dt = features(vec![1, 12], TensorData::Fp64(vec![0.0; 12]));
        assert_eq!(
            error(&[wrong_dt]),
            "inference input 'features' data-type is 'FP64', but model 'titanic' expects 'FP32'"
        );
        let wrong_shape = features(vec![1, 11], TensorData::Fp32(vec![0.0; 11]));
        assert_eq!(
            error(&[wrong_shape]),
            "unexpected shape for input 'features' for model 'titanic'. Expected [-1,12], got \
             [1,11]. "
        );
        let mut wrong_name = features(vec![1, 12], TensorData::Fp32(vec![0.0; 12]));
        wrong_name.name = "x".into();
        assert_eq!(
            error(&[wrong_name.clone()]),
            "unexpected inference input 'x' for model 'titanic'"
        );
        let good = features(vec![1, 12], TensorData::Fp32(vec![0.0; 12]));
        assert_eq!(
            error(&[good.clone(), good.clone()]),
            "expected 1 inputs but got 2 inputs for model 'titanic'. Got input(s) \
             ['features','features'], but missing required input(s) []. Please provide all \
             required input(s)."
        );
        assert_eq!(
            error(&[]),
            "expected 1 inputs but got 0 inputs for model 'titanic'. Got input(s) [], but \
             missing required input(s) ['features']. Please provide all required input(s)."
        );
    }

    #[test]
    fn outputs_resolve_in_request_order_or_all() {
        let m = titanic();
        assert_eq!(m.resolve_outputs([]), Ok(vec![0, 1]));
        assert_eq!(m.resolve_outputs(["margin"]), Ok(vec![1]));
        assert!(m.resolve_outputs(["nope"]).is_err());
        assert!(m.resolve_outputs(["margin", "margin"]).is_err());
    }
}

/// The executions a model that batches itself counts: per batch size
/// (rows), how many, and their compute time in nanoseconds.
#[derive(Debug, Default)]
pub struct Executions(std::sync::Mutex<std::collections::BTreeMap<usize, (u64, u64)>>);

impl Executions {
    /// Counts one execution of `rows` rows that took `compute`.
    pub fn count(&self, rows: usize, compute: Duration) {
        let mut tallies = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let tally = tallies.entry(rows).or_default();
        tally.0 += 1;
        tally.1 += u64::try_from(compute.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Each batch size (rows), its executions and their compute time (ns).
    pub fn tallies(&self) -> Vec<(usize, u64, u64)> {
        let tallies = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tallies
            .iter()
            .map(|(&rows, &(count, ns))| (rows, count, ns))
            .collect()
    }
}
