//! The messages between the server and a Python worker, on their Unix
//! socket, as frames: a 16-byte head (a mark, the JSON message's length as
//! a little-endian u32, its payload's length as a little-endian u64), the
//! message, then its payload. JSON because the worker reads it with the
//! standard library alone, and a message is small: a request's tensors
//! never cross the socket, only where they lie in a shared-memory segment
//! (`segment.rs`). The tensors of the calls a model makes while it
//! computes (BLS: inputs one way, outputs the other), of a decoupled
//! model's responses and of the files `pb_utils.load_model` hands over go
//! as the payload, from where they lie, and the message says where each
//! lies in it (offset and length): any size up to the pool's limit
//! ([`pool_limit`]), never inline in the JSON. The mark finds a reader
//! that lost its place at once, rather than after it took bytes of a
//! tensor for a length. The worker's side is `channel.py`.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

/// The longest message a worker may send: its answers are a few hundred
/// bytes, a load failure's traceback a few kilobytes; tensors go in the
/// payload.
const MAX_MESSAGE: usize = 16 << 20;

/// What begins every frame.
const MARK: [u8; 4] = *b"wsF1";

/// A frame's head: the mark, the message's length, the payload's.
const HEAD: usize = 16;

/// The most bytes of tensors one frame carries: half the memory the server
/// may use (its cgroup's limit, or the machine's), as Linux sizes
/// `/dev/shm`, where Triton's Python backend keeps the pool its BLS tensors
/// pass through. A model's call past it gets Triton's error
/// ("Failed to increase the shared memory pool size ..."), and the worker
/// lives on.
pub(crate) fn pool_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let physical = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib = line.split_whitespace().nth(1)?.parse::<usize>().ok()?;
                Some(kib.saturating_mul(1024))
            })
            .unwrap_or(8 << 30);
        let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
            .ok()
            .and_then(|limit| limit.trim().parse::<usize>().ok());
        let memory = cgroup.map_or(physical, |c| c.min(physical));
        (memory / 2).max(64 << 20)
    })
}

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

impl Placed {
    /// Where outputs `placed` end in their segment: the bytes they use.
    pub(crate) fn extent(placed: &[Placed]) -> usize {
        placed
            .iter()
            .map(|p| p.3.saturating_add(p.4))
            .max()
            .unwrap_or(0)
    }
}

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
    /// The most bytes of tensors one BLS call may carry ([`pool_limit`]).
    pub(crate) pool_limit: usize,
}

/// One request.
#[derive(Debug, Serialize)]
pub(crate) struct Infer<'a> {
    pub(crate) op: &'static str,
    /// The input segment's size, for the worker to map.
    pub(crate) size: usize,
    pub(crate) inputs: Vec<InputPlace<'a>>,
    pub(crate) outputs: Vec<&'a str>,
    pub(crate) parameters: serde_json::Map<String, serde_json::Value>,
    /// A decoupled model's request: the number its responses carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) id: Option<u64>,
    /// Where its outputs go in the output segment, when the server holds
    /// places there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) out: Option<OutputPlacement>,
}

/// Where a worker writes a request's outputs, around the places of its
/// output segment that the server still holds (earlier outputs, lent to
/// their responses: `segment.rs`), as `[at, room, held]`: at `at` when
/// they all fit in `room` bytes (all that is left when it is null), else
/// from `held` on. Absent, as most often (nothing held), from the start.
#[derive(Debug, Serialize)]
pub(crate) struct OutputPlacement(usize, Option<usize>, usize);

impl OutputPlacement {
    /// The placement to send: none while nothing is held.
    pub(crate) fn of(p: crate::segment::Placement) -> Option<OutputPlacement> {
        (p.held > 0).then_some(OutputPlacement(p.at, p.room, p.held))
    }
}

/// One input of an [`Infer`]: name, datatype, shape, offset, length, and
/// whether the offset is in the shared heap (else in the input segment).
pub(crate) type InputPlace<'a> = (&'a str, &'static str, &'a [usize], usize, usize, bool);

/// A batch of requests to a Triton model, for one call of its `execute`
/// (Triton's dynamic batcher hands a model the requests, not a join of
/// them): each request as [`Infer`] has it, their inputs in the one
/// segment.
#[derive(Debug, Serialize)]
pub(crate) struct InferBatch<'a> {
    pub(crate) op: &'static str,
    pub(crate) size: usize,
    pub(crate) requests: Vec<Infer<'a>>,
    /// Where all the batch's outputs go.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) out: Option<OutputPlacement>,
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
        /// The worker mapped the shared heap: large inputs go there.
        #[serde(default)]
        heap: bool,
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
    /// placed in the frame's payload; or its error (`kind` as for
    /// [`Reply::Error`]); or, `empty`, the final flag alone.
    Response {
        id: u64,
        #[serde(rename = "final", default)]
        last: bool,
        #[serde(default)]
        outputs: Vec<Placed>,
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
    /// Each input: name, datatype, shape, and where its raw bytes lie in
    /// the frame's payload (offset, length).
    #[serde(default)]
    pub(crate) inputs: Vec<(String, String, Vec<usize>, usize, usize)>,
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
    /// `load_model`'s files: path in the model's folder, and where its
    /// bytes lie in the frame's payload (offset, length).
    #[serde(default)]
    pub(crate) files: BTreeMap<String, (usize, usize)>,
    /// A decoupled model's call number: its answer carries it back (the
    /// model's calls run at once).
    #[serde(default)]
    pub(crate) call: Option<u64>,
    /// Its tensors (and files) lie in the worker's call segment, at the
    /// offsets given from `at`, not in the frame's payload; the answer's
    /// go there too.
    #[serde(default)]
    pub(crate) segment: bool,
    /// Where in the call segment the call's bytes begin.
    #[serde(default)]
    pub(crate) at: usize,
    /// The bytes from `at` the answer may take (the worker's model still
    /// holds earlier answers past them); `None`: all the segment past `at`.
    #[serde(default)]
    pub(crate) room: Option<usize>,
    /// Where the earlier answers the model still holds end: an answer
    /// that does not fit `room` goes there, and no page below it is
    /// given back.
    #[serde(default)]
    pub(crate) held: usize,
}

/// The answer to a [`Reply::Bls`]: the callee's outputs (name, datatype,
/// shape, and where its raw bytes lie in the frame's payload: offset,
/// length), or its error.
#[derive(Debug, Serialize)]
pub(crate) struct BlsAnswer {
    pub(crate) op: &'static str,
    pub(crate) outputs: Vec<(String, &'static str, Vec<usize>, usize, usize)>,
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
    /// The outputs' bytes lie in the worker's call segment, at the offsets
    /// given from `at`, not in the frame's payload.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) segment: bool,
    /// Where in the call segment the outputs' bytes begin.
    #[serde(skip_serializing_if = "is_zero")]
    pub(crate) at: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    send_frame(stream, message, &[] as &[&[u8]])
}

/// Writes one message and its payload, the bytes of the tensors it places,
/// given as parts (each tensor's own buffer, sent from where it lies).
pub(crate) fn send_frame(
    stream: &mut UnixStream,
    message: &impl Serialize,
    payload: &[impl AsRef<[u8]>],
) -> io::Result<()> {
    let size: usize = payload.iter().map(|part| part.as_ref().len()).sum();
    let mut frame = vec![0u8; HEAD];
    serde_json::to_writer(&mut frame, message).map_err(io::Error::other)?;
    let len = u32::try_from(frame.len() - HEAD).map_err(io::Error::other)?;
    frame[..4].copy_from_slice(&MARK);
    frame[4..8].copy_from_slice(&len.to_le_bytes());
    frame[8..16].copy_from_slice(&(size as u64).to_le_bytes());
    if size <= 64 << 10 {
        for part in payload {
            frame.extend_from_slice(part.as_ref());
        }
        return stream.write_all(&frame);
    }
    stream.write_all(&frame)?;
    for part in payload {
        stream.write_all(part.as_ref())?;
    }
    Ok(())
}

/// Reads one message and its payload; `UnexpectedEof` when the worker is
/// gone, `InvalidData` for what is not a frame or passes the limits.
pub(crate) fn receive(stream: &mut UnixStream) -> io::Result<(Reply, Vec<u8>)> {
    let (body, payload) = receive_frame(stream, pool_limit())?;
    let reply =
        serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok((reply, payload))
}

/// Reads one frame: its message's bytes and its payload, the payload no
/// longer than `limit`.
pub(crate) fn receive_frame(
    stream: &mut UnixStream,
    limit: usize,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut head = [0u8; HEAD];
    stream.read_exact(&mut head)?;
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    if head[..4] != MARK {
        return Err(bad(format!(
            "{:?} where a frame begins (the reader lost its place)",
            String::from_utf8_lossy(&head)
        )));
    }
    let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    let size = u64::from_le_bytes([
        head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15],
    ]);
    if len > MAX_MESSAGE {
        return Err(bad(format!(
            "a message of {len} bytes, past the {MAX_MESSAGE}-byte limit"
        )));
    }
    let size = usize::try_from(size)
        .ok()
        .filter(|&size| size <= limit)
        .ok_or_else(|| {
            bad(format!(
                "a payload of {size} bytes, past the {limit}-byte limit"
            ))
        })?;
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    // Read into fresh capacity (not zeroed first): a payload may be a
    // gigabyte.
    let mut payload = Vec::new();
    payload
        .try_reserve_exact(size)
        .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e))?;
    let read = Read::take(&mut *stream, size as u64).read_to_end(&mut payload)?;
    if read < size {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok((body, payload))
}

/// The bytes `offset..offset + len` of a frame's payload, or why not.
pub(crate) fn placed(payload: &[u8], offset: usize, len: usize) -> Option<&[u8]> {
    payload.get(offset..offset.checked_add(len)?)
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
            (Reply::Done { outputs, .. }, payload) => {
                let Placed(name, datatype, shape, offset, len, own) = &outputs[0];
                assert_eq!((name.as_str(), datatype.as_str()), ("y", "FP32"));
                assert_eq!((shape, *offset, *len, own.len()), (&vec![2], 0, 8, 0));
                // An output's own parameters, when the worker gives some.
                assert_eq!(outputs[1].5["content_type"], "str");
                assert!(payload.is_empty());
            }
            other => panic!("{other:?}"),
        }
        // A payload, small and past the size sent with the head.
        for size in [3, 200_000] {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let writer = {
                let mut a = a.try_clone().unwrap();
                let bytes = bytes.clone();
                std::thread::spawn(move || {
                    send_frame(
                        &mut a,
                        &serde_json::json!({"op": "executed", "id": 1}),
                        &[&bytes],
                    )
                })
            };
            let (reply, payload) = receive(&mut b).unwrap();
            writer.join().unwrap().unwrap();
            assert!(matches!(reply, Reply::Executed { id: 1, .. }));
            assert_eq!(payload, bytes);
        }
        drop(a);
        assert_eq!(
            receive(&mut b).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn what_is_not_a_frame_is_refused_before_anything_is_allocated() {
        let head = |mark: &[u8; 4], len: u32, size: u64| {
            let mut head = mark.to_vec();
            head.extend_from_slice(&len.to_le_bytes());
            head.extend_from_slice(&size.to_le_bytes());
            head
        };
        for (bytes, says) in [
            // The old framing's length, or a tensor's bytes: no mark.
            (head(b"\x10\0\0\0", 0, 0), "where a frame begins"),
            (head(&MARK, u32::MAX, 0), "past the 16777216-byte limit"),
            (
                head(&MARK, 2, u64::MAX),
                "a payload of 18446744073709551615 bytes",
            ),
        ] {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            a.write_all(&bytes).unwrap();
            let error = receive(&mut b).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            assert!(error.to_string().contains(says), "{error}");
        }
        // A payload past the frame's limit.
        let (mut a, mut b) = UnixStream::pair().unwrap();
        a.write_all(&head(&MARK, 2, 11)).unwrap();
        let error = receive_frame(&mut b, 10).unwrap_err();
        assert!(
            error.to_string().contains("past the 10-byte limit"),
            "{error}"
        );
    }

    #[test]
    fn a_place_outside_the_payload_is_none() {
        let payload = [1u8, 2, 3];
        assert_eq!(placed(&payload, 1, 2), Some(&payload[1..]));
        assert_eq!(placed(&payload, 2, 2), None);
        assert_eq!(placed(&payload, usize::MAX, 2), None);
        assert_eq!(placed(&payload, 3, 0), Some(&[][..]));
    }
}
