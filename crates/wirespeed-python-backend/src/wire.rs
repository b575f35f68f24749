//! The messages between the server and a Python worker, on their Unix
//! socket: a 4-byte little-endian length, then a JSON object. JSON because
//! the worker reads it with the standard library alone, and a message is
//! small: tensors never cross the socket, only where they lie in a
//! shared-memory segment (`segment.rs`). The worker's side is `worker.py`.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

/// The longest message a worker may send: its answers are a few hundred
/// bytes, a load failure's traceback a few kilobytes.
const MAX_MESSAGE: usize = 16 << 20;

/// Where one output lies in a segment: name, datatype, shape, offset,
/// length in bytes, and the output's own parameters when it has any (an
/// MLServer runtime's content type), written as a list of five or six.
#[derive(Debug, Deserialize)]
pub(crate) struct Placed(
    pub(crate) String,
    pub(crate) String,
    pub(crate) Vec<usize>,
    pub(crate) usize,
    pub(crate) usize,
    #[serde(default)] pub(crate) serde_json::Map<String, serde_json::Value>,
);

/// Parameters as the worker writes them (a BLS call's, an output's own):
/// strings, numbers and bools, what the protocol's parameters hold;
/// anything else, and `null`, left out.
pub(crate) fn parameters(
    given: &serde_json::Map<String, serde_json::Value>,
) -> wirespeed_core::Parameters {
    use serde_json::Value;
    use wirespeed_core::ParameterValue;
    given
        .iter()
        .filter_map(|(key, value)| {
            let value = match value {
                Value::Bool(b) => ParameterValue::Bool(*b),
                Value::String(s) => ParameterValue::String(s.clone()),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => ParameterValue::Int(i),
                    None => ParameterValue::Float(n.as_f64()?),
                },
                _ => return None,
            };
            Some((key.clone(), value))
        })
        .collect()
}

/// The key of an `infer` message's `parameters` under which the inputs'
/// own parameters go, by input name (`$` starts no parameter a protocol
/// decodes; the worker takes it out).
pub(crate) const INPUT_PARAMETERS: &str = "$inputs";

/// The first message to a worker: what to load, and how.
#[derive(Debug, Serialize)]
pub(crate) struct Load {
    pub(crate) op: &'static str,
    /// The model's `model.py`.
    pub(crate) file: String,
    /// `Model.load(config)`'s argument.
    pub(crate) config: serde_json::Value,
    /// `TritonPythonModel.initialize(args)`'s argument.
    pub(crate) triton_args: BTreeMap<String, String>,
    /// The declared outputs (name, datatype), for the worker to cast to.
    pub(crate) outputs: Vec<serde_json::Value>,
    /// Python modules the worker installs before it loads the model
    /// (`triton_python_backend_utils`), by name.
    pub(crate) modules: BTreeMap<&'static str, &'static str>,
    /// The model answers with streams (Triton's decoupled policy). Our
    /// API's `predict` written as a generator streams too; the worker
    /// says so in its `ready`.
    pub(crate) decoupled: bool,
    /// Whose API the model is written to: `""` (ours or Triton's, told
    /// apart by its classes), `"mlserver"` (an `mlserver.MLModel` named by
    /// `implementation`), `"kserve"` (a `kserve.Model` in `file`) or
    /// `"sklearn"` (a scikit-learn model file).
    pub(crate) api: &'static str,
    /// The API's own load settings: MLServer's implementation and settings
    /// file, the scikit-learn runtime's functions by output.
    pub(crate) runtime: serde_json::Value,
    /// How long an idle worker polls its socket for the next request
    /// before it sleeps, in microseconds: under load the next request
    /// comes as the last answer is read, and a worker that slept waits for
    /// the kernel to wake it. 0 when the workers would take every core.
    pub(crate) linger_us: u64,
}

/// One request.
#[derive(Debug, Serialize)]
pub(crate) struct Infer<'a> {
    pub(crate) op: &'static str,
    /// The input segment's size, for the worker to map.
    pub(crate) size: usize,
    pub(crate) inputs: Vec<(&'a str, &'static str, &'a [usize], usize, usize)>,
    pub(crate) outputs: Vec<&'a str>,
    pub(crate) parameters: serde_json::Map<String, serde_json::Value>,
    /// A decoupled model's request: the number its responses carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<u64>,
}

/// A batch of requests to a Triton model, for one call of its `execute`
/// (Triton's dynamic batcher hands a model the requests, not a join of
/// them): each request as [`Infer`] has it, their inputs in the one
/// segment.
#[derive(Debug, Serialize)]
pub(crate) struct InferBatch<'a> {
    pub(crate) op: &'static str,
    pub(crate) size: usize,
    pub(crate) requests: Vec<Infer<'a>>,
}

/// One request's answer in a batch: its outputs, or its error.
#[derive(Debug, Deserialize)]
pub(crate) struct BatchAnswer {
    #[serde(default)]
    pub(crate) outputs: Option<Vec<Placed>>,
    #[serde(default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) error: Option<String>,
}

/// What a worker answers.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(crate) enum Reply {
    /// The model loaded.
    Ready {
        pid: u32,
        python: String,
        #[serde(default)]
        metrics: Vec<super::metrics::Update>,
        /// The model streams its answers (decoupled).
        #[serde(default)]
        decoupled: bool,
        /// The metadata the model's own server answers (an MLServer
        /// runtime's `metadata()`).
        #[serde(default)]
        metadata: Option<serde_json::Value>,
    },
    /// The model did not load: the traceback.
    Failed { error: String },
    /// A request's outputs, in the output segment.
    Done {
        outputs: Vec<Placed>,
        #[serde(default)]
        metrics: Vec<super::metrics::Update>,
    },
    /// A batch's answers (`infer_batch`), one per request in its order.
    Answers {
        answers: Vec<BatchAnswer>,
        #[serde(default)]
        metrics: Vec<super::metrics::Update>,
    },
    /// The model's code calls another model (BLS) while computing, or
    /// asks whether one is ready: the server answers with [`BlsAnswer`],
    /// then waits for this request's answer again.
    Bls(BlsCall),
    /// The model's operation on its custom metrics (`pb_utils.Metric`)
    /// inside `initialize` or `execute`: carried out at once and answered
    /// with [`MetricAnswer`], the changes the worker kept before it
    /// (`pending`) applied first.
    Metric {
        metric: super::metrics::Update,
        #[serde(default)]
        pending: Vec<super::metrics::Update>,
        /// A decoupled model's call number, carried back.
        #[serde(default)]
        call: Option<u64>,
    },
    /// A request failed in the model's code: `kind` is `model`, `invalid`
    /// (Triton's INVALID_ARG) or `interrupted` (past its deadline).
    /// A decoupled model's request carries its `id`.
    Error {
        kind: String,
        error: String,
        #[serde(default)]
        metrics: Vec<super::metrics::Update>,
        #[serde(default)]
        id: Option<u64>,
    },
    /// One response of a decoupled model's request `id`: its outputs,
    /// whose bytes (`raw` of them) follow this message on the socket; or
    /// its error (`kind` as for [`Reply::Error`]); or, `empty`, the final
    /// flag alone.
    Response {
        id: u64,
        #[serde(rename = "final", default)]
        last: bool,
        #[serde(default)]
        outputs: Vec<Placed>,
        #[serde(default)]
        raw: usize,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        kind: Option<String>,
        #[serde(default)]
        empty: bool,
        #[serde(default)]
        metrics: Vec<super::metrics::Update>,
    },
    /// A decoupled model's `execute` returned for request `id`: the worker
    /// takes the next request (the model's threads may still send).
    Executed {
        id: u64,
        #[serde(default)]
        metrics: Vec<super::metrics::Update>,
    },
}

/// A model's call of another (`pb_utils.InferenceRequest(...).exec()`),
/// or its question (`pb_utils.is_model_ready`).
#[derive(Debug, Deserialize)]
pub(crate) struct BlsCall {
    pub(crate) model: String,
    #[serde(default)]
    pub(crate) version: Option<String>,
    /// Each input: name, datatype, shape, raw bytes in base64.
    #[serde(default)]
    pub(crate) inputs: Vec<(String, String, Vec<usize>, String)>,
    #[serde(default)]
    pub(crate) outputs: Vec<String>,
    #[serde(default)]
    pub(crate) parameters: serde_json::Map<String, serde_json::Value>,
    /// `exec(decoupled=True)`: every response of the callee's stream.
    #[serde(default)]
    pub(crate) decoupled: bool,
    /// The request's own `timeout` (microseconds; 0 for none), within the
    /// calling request's deadline.
    #[serde(default)]
    pub(crate) timeout_us: u64,
    /// `is_model_ready`: only whether the model is ready.
    #[serde(default)]
    pub(crate) ready_only: bool,
    /// `load_model` (`"load"`) or `unload_model` (`"unload"`): the model
    /// loaded or unloaded, not called.
    #[serde(default)]
    pub(crate) control: Option<String>,
    /// `load_model`'s configuration (JSON), when given.
    #[serde(default)]
    pub(crate) config: Option<String>,
    /// `load_model`'s files: path in the model's folder, bytes in base64.
    #[serde(default)]
    pub(crate) files: BTreeMap<String, String>,
    /// A decoupled model's call number: its answer carries it back (the
    /// model's calls run at once).
    #[serde(default)]
    pub(crate) call: Option<u64>,
}

/// The answer to a [`Reply::Bls`]: the callee's outputs (name, datatype,
/// shape, raw bytes in base64), or its error.
#[derive(Debug, Serialize)]
pub(crate) struct BlsAnswer {
    pub(crate) op: &'static str,
    pub(crate) outputs: Vec<(String, &'static str, Vec<usize>, String)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// The error's Triton code (`pb_utils.TritonError`'s).
    pub(crate) code: i32,
    /// A decoupled call's responses, in order (each with its outputs or
    /// its error); `outputs` and `error` then say nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) responses: Option<Vec<BlsAnswer>>,
    /// `is_model_ready`'s answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ready: Option<bool>,
    /// The call's number, when it came with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) call: Option<u64>,
    /// One response of a decoupled call: the callee flagged it final.
    #[serde(rename = "final", skip_serializing_if = "Option::is_none")]
    pub(crate) last: Option<bool>,
}

/// The answer to a [`Reply::Metric`]: the value read, or why the
/// operation was refused.
#[derive(Debug, Serialize)]
pub(crate) struct MetricAnswer {
    pub(crate) op: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) value: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) call: Option<u64>,
}

/// Writes one message.
pub(crate) fn send(stream: &mut UnixStream, message: &impl Serialize) -> io::Result<()> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, message).map_err(io::Error::other)?;
    let len = u32::try_from(frame.len() - 4).map_err(io::Error::other)?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    stream.write_all(&frame)
}

/// Reads one message; `UnexpectedEof` when the worker is gone.
pub(crate) fn receive(stream: &mut UnixStream) -> io::Result<Reply> {
    let mut head = [0u8; 4];
    stream.read_exact(&mut head)?;
    let len = u32::from_le_bytes(head) as usize;
    if len > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {len} bytes, past the {MAX_MESSAGE}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The largest tensor bytes one streamed response may carry.
const MAX_RAW: usize = 1 << 31;

/// Reads the `len` bytes that follow a [`Reply::Response`].
pub(crate) fn receive_raw(stream: &mut UnixStream, len: usize) -> io::Result<Vec<u8>> {
    if len > MAX_RAW {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a response of {len} bytes, past the {MAX_RAW}-byte limit"),
        ));
    }
    let mut raw = vec![0u8; len];
    stream.read_exact(&mut raw)?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_a_socket() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        send(
            &mut a,
            &serde_json::json!({"op": "done", "outputs": [["y", "FP32", [2], 0, 8],
                ["z", "BYTES", [1], 8, 9, {"content_type": "str"}]]}),
        )
        .unwrap();
        match receive(&mut b).unwrap() {
            Reply::Done { outputs, .. } => {
                let Placed(name, datatype, shape, offset, len, own) = &outputs[0];
                assert_eq!((name.as_str(), datatype.as_str()), ("y", "FP32"));
                assert_eq!((shape, *offset, *len, own.len()), (&vec![2], 0, 8, 0));
                // An output's own parameters, when the worker gives some.
                assert_eq!(outputs[1].5["content_type"], "str");
            }
            other => panic!("{other:?}"),
        }
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(
            receive(&mut b).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        drop(a);
        assert_eq!(
            receive(&mut b).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
