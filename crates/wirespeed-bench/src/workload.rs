//! What each request says: the protocol, the model, and a generated body.
//!
//! A run's requests are built once, before the clock starts, and shared
//! (`Bytes` and `Arc` clones), so producing them costs the client nothing
//! while it measures.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use wirespeed_proto::inference as pb;

use crate::target::Scheme;

/// The wire protocol of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// V2 REST with a JSON body (`POST /v2/models/M/infer`).
    V2Json,
    /// V2 REST with Triton's binary tensor extension: a JSON header, then
    /// raw tensor bytes; outputs come back binary.
    V2Binary,
    /// V2 REST with a raw body (`Inference-Header-Content-Length: 0`), for
    /// single-input models.
    V2Raw,
    /// V2 gRPC `ModelInfer` with `raw_input_contents`.
    Grpc,
    /// TF Serving REST (`POST /v1/models/M:predict`, `instances`).
    TfServing,
    /// Clipper REST (`POST /M/predict`, `input` or `input_batch`).
    Clipper,
    /// A plain `GET` of `--path`.
    Get,
}

impl Protocol {
    /// The scheme a target needs for this protocol.
    pub fn scheme(self) -> Scheme {
        match self {
            Protocol::Grpc => Scheme::Grpc,
            _ => Scheme::Http,
        }
    }

    /// The name used in tables and files.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V2Json => "v2-json",
            Protocol::V2Binary => "v2-binary",
            Protocol::V2Raw => "v2-raw",
            Protocol::Grpc => "grpc",
            Protocol::TfServing => "tf-serving",
            Protocol::Clipper => "clipper",
            Protocol::Get => "get",
        }
    }
}

/// How FP32 values are written in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Floats {
    /// As `json.dumps(array.astype(np.float32).tolist())` writes them: the
    /// float32 value widened to a double and printed in full, ~19 characters
    /// (`0.12345679104328156`).
    Long,
    /// The shortest text that reads back as the same float32, ~10
    /// characters (`0.12345679`).
    Short,
}

/// A tensor's values, generated.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// FP32 values in [0, 1) from a seeded generator.
    Fp32 {
        /// The tensor's shape, `[batch, width]`.
        shape: [usize; 2],
        /// How they are written in JSON.
        floats: Floats,
    },
    /// Rows of the Titanic test set in the 12-feature layout of the
    /// `titanic` model, cycled.
    Titanic {
        /// How many rows.
        rows: usize,
    },
    /// INT64 values.
    Int64 {
        /// The tensor's shape.
        shape: [usize; 2],
    },
    /// BOOL values.
    Bool {
        /// The tensor's shape.
        shape: [usize; 2],
    },
    /// One BYTES element of this many bytes.
    Bytes {
        /// Its length.
        len: usize,
    },
}

/// The body of a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// A generated tensor.
    Tensor(Values),
    /// A file's bytes, sent as they are (with the protocol's path and headers).
    File(PathBuf),
    /// No body (`GET`).
    Empty,
}

/// What every request of a run sends.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The protocol.
    pub protocol: Protocol,
    /// The model (the Clipper application).
    pub model: String,
    /// The input's name.
    pub input: String,
    /// The body.
    pub payload: Payload,
    /// The path of a `GET`.
    pub path: String,
    /// Ask for outputs in binary (V2 JSON), so the answer's encoding costs
    /// little next to the request's decoding.
    pub binary_output: bool,
    /// How deep the V2 JSON `data` array is nested: 0 is flat, 1 is one
    /// array per row (only for 2-D tensors).
    pub nesting: usize,
    /// Send the body in this many `Transfer-Encoding: chunked` pieces
    /// instead of with `Content-Length` (HTTP only; 0 is off).
    pub segments: usize,
}

/// An HTTP/1.1 request, ready to write.
#[derive(Debug, Clone)]
pub struct HttpRequest {
    /// The request line and headers, ending in the blank line.
    pub head: Bytes,
    /// The body: one piece, or the chunks of a chunked body.
    pub body: Vec<Bytes>,
}

impl HttpRequest {
    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.iter().map(Bytes::len).sum::<usize>()
    }

    /// Whether it has no bytes at all (never: there is always a head).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A prepared request.
#[derive(Debug, Clone)]
pub enum Request {
    /// HTTP/1.1.
    Http(Arc<HttpRequest>),
    /// A gRPC `ModelInfer` message.
    Grpc(Arc<pb::ModelInferRequest>),
}

/// The first rows of the Titanic test set (`tests/data/titanic/test.csv`,
/// passengers 892–899) in the `titanic` model's 12-feature layout, as the
/// Go ML benchmark's feature transform makes them.
const TITANIC_ROWS: [[f32; 12]; 8] = [
    [
        3.0, 1.0, 0.0, 0.43125, 0.16666667, 0.0, -0.421708, 0.0, 0.0, 0.0, 1.0, 0.0,
    ],
    [
        3.0, 0.0, 1.0, 0.5875, 0.33333334, 0.0, -0.43, 0.0, 1.0, 0.0, 0.0, 0.0,
    ],
    [
        2.0, 1.0, 0.0, 0.775, 0.16666667, 0.0, -0.403125, 0.0, 0.0, 0.0, 1.0, 0.0,
    ],
    [
        3.0, 1.0, 0.0, 0.3375, 0.16666667, 0.0, -0.413375, 0.0, 1.0, 0.0, 0.0, 0.0,
    ],
    [
        3.0, 0.0, 1.0, 0.275, 0.33333334, 1.0, -0.377125, 0.0, 1.0, 0.0, 0.0, 0.0,
    ],
    [
        3.0, 1.0, 0.0, 0.175, 0.16666667, 0.0, -0.40775, 0.0, 1.0, 0.0, 0.0, 0.0,
    ],
    [
        3.0, 0.0, 1.0, 0.375, 0.16666667, 0.0, -0.423708, 0.0, 0.0, 0.0, 1.0, 0.0,
    ],
    [
        2.0, 1.0, 0.0, 0.325, 0.33333334, 1.0, -0.21, 0.0, 1.0, 0.0, 0.0, 0.0,
    ],
];

/// One passenger's 12 features: the first row of [`TITANIC_ROWS`].
pub fn titanic_row() -> [f32; 12] {
    TITANIC_ROWS[0]
}

/// A generated tensor: datatype, shape, JSON elements and raw bytes.
struct Tensor {
    datatype: &'static str,
    shape: Vec<usize>,
    /// Each element's JSON text.
    json: Vec<String>,
    raw: Vec<u8>,
}

impl Values {
    fn tensor(&self) -> Tensor {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        match *self {
            Values::Fp32 { shape, floats } => {
                let values: Vec<f32> = (0..shape[0] * shape[1])
                    .map(|_| rng.random::<f32>())
                    .collect();
                let json = values
                    .iter()
                    .map(|&v| match floats {
                        Floats::Long => ryu::Buffer::new().format(v as f64).to_owned(),
                        Floats::Short => ryu::Buffer::new().format(v).to_owned(),
                    })
                    .collect();
                Tensor {
                    datatype: "FP32",
                    shape: shape.to_vec(),
                    json,
                    raw: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                }
            }
            Values::Titanic { rows } => {
                let values: Vec<f32> = TITANIC_ROWS
                    .iter()
                    .cycle()
                    .take(rows)
                    .flatten()
                    .copied()
                    .collect();
                Tensor {
                    datatype: "FP32",
                    shape: vec![rows, 12],
                    json: values
                        .iter()
                        .map(|&v| ryu::Buffer::new().format(v as f64).to_owned())
                        .collect(),
                    raw: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                }
            }
            Values::Int64 { shape } => {
                let values: Vec<i64> = (0..shape[0] * shape[1])
                    .map(|_| rng.random_range(-1_000_000..1_000_000))
                    .collect();
                Tensor {
                    datatype: "INT64",
                    shape: shape.to_vec(),
                    json: values.iter().map(|v| v.to_string()).collect(),
                    raw: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                }
            }
            Values::Bool { shape } => {
                let values: Vec<bool> = (0..shape[0] * shape[1]).map(|_| rng.random()).collect();
                Tensor {
                    datatype: "BOOL",
                    shape: shape.to_vec(),
                    json: values.iter().map(|v| v.to_string()).collect(),
                    raw: values.iter().map(|&v| u8::from(v)).collect(),
                }
            }
            Values::Bytes { len } => {
                let text: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
                let mut raw = (len as u32).to_le_bytes().to_vec();
                raw.extend_from_slice(text.as_bytes());
                Tensor {
                    datatype: "BYTES",
                    shape: vec![1, 1],
                    json: vec![format!("\"{text}\"")],
                    raw,
                }
            }
        }
    }
}

/// `[a,b,c]`, or rows of `width` as `[[a,b],[c,d]]`.
fn json_array(elements: &[String], width: Option<usize>) -> String {
    let mut out = String::with_capacity(elements.iter().map(|e| e.len() + 1).sum::<usize>() + 16);
    out.push('[');
    match width {
        None => out.push_str(&elements.join(",")),
        Some(width) => {
            for (i, row) in elements.chunks(width.max(1)).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('[');
                out.push_str(&row.join(","));
                out.push(']');
            }
        }
    }
    out.push(']');
    out
}

fn shape_json(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(","))
}

impl Workload {
    /// A workload of `protocol` sending `payload` to `model`'s `input`.
    pub fn new(protocol: Protocol, model: &str, input: &str, payload: Payload) -> Workload {
        Workload {
            protocol,
            model: model.to_owned(),
            input: input.to_owned(),
            payload,
            path: "/v2".to_owned(),
            binary_output: false,
            nesting: 0,
            segments: 0,
        }
    }

    /// Builds the request every connection will send.
    pub fn build(&self) -> anyhow::Result<Request> {
        if self.protocol == Protocol::Grpc {
            return self.grpc().map(|m| Request::Grpc(Arc::new(m)));
        }
        let (method, path, headers, body) = self.http_parts()?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: wirespeed-bench\r\n"
        );
        head.push_str(&headers);
        let body = match (&body, self.segments) {
            (None, _) => {
                head.push_str("\r\n");
                Vec::new()
            }
            (Some(body), 0) => {
                let _ = write!(head, "Content-Length: {}\r\n\r\n", body.len());
                vec![body.clone()]
            }
            (Some(body), n) => {
                head.push_str("Transfer-Encoding: chunked\r\n\r\n");
                let size = body.len().div_ceil(n).max(1);
                let mut pieces: Vec<Bytes> = Vec::new();
                let mut start = 0;
                while start < body.len() {
                    let end = (start + size).min(body.len());
                    let mut chunk = format!("{:x}\r\n", end - start).into_bytes();
                    chunk.extend_from_slice(&body[start..end]);
                    chunk.extend_from_slice(b"\r\n");
                    pieces.push(chunk.into());
                    start = end;
                }
                pieces.push(Bytes::from_static(b"0\r\n\r\n"));
                pieces
            }
        };
        Ok(Request::Http(Arc::new(HttpRequest {
            head: head.into(),
            body,
        })))
    }

    fn values(&self) -> anyhow::Result<&Values> {
        match &self.payload {
            Payload::Tensor(values) => Ok(values),
            other => bail!(
                "{} needs a generated tensor, not {other:?}",
                self.protocol.name()
            ),
        }
    }

    /// Method, path, extra headers and body of an HTTP request.
    fn http_parts(&self) -> anyhow::Result<(&'static str, String, String, Option<Bytes>)> {
        let model = &self.model;
        let infer = format!("/v2/models/{model}/infer");
        let json = "Content-Type: application/json\r\n".to_owned();
        if let Payload::File(path) = &self.payload {
            let body = std::fs::read(path)
                .with_context(|| format!("reading the body file {}", path.display()))?;
            let (path, headers) = match self.protocol {
                Protocol::V2Json => (infer, json),
                Protocol::TfServing => (format!("/v1/models/{model}:predict"), json),
                Protocol::Clipper => (format!("/{model}/predict"), json),
                Protocol::V2Raw => (infer, "Inference-Header-Content-Length: 0\r\nContent-Type: application/octet-stream\r\n".to_owned()),
                Protocol::Get => (self.path.clone(), String::new()),
                other => bail!("a body file can be sent as v2-json, v2-raw, tf-serving, clipper or get, not {}", other.name()),
            };
            return Ok(("POST", path, headers, Some(body.into())));
        }
        if self.protocol == Protocol::Get {
            return Ok(("GET", self.path.clone(), String::new(), None));
        }
        let tensor = self.values()?.tensor();
        let rows = tensor.shape[0];
        let width = tensor.shape[1..].iter().product::<usize>();
        let input = &self.input;
        let (path, headers, body) = match self.protocol {
            Protocol::V2Json => {
                let nested = match self.nesting {
                    0 => None,
                    1 => Some(width),
                    n => bail!("V2 data can be nested 0 or 1 deep in a 2-D tensor, not {n}"),
                };
                let outputs = if self.binary_output {
                    ",\"parameters\":{\"binary_data_output\":true}"
                } else {
                    ""
                };
                let body = format!(
                    "{{\"inputs\":[{{\"name\":\"{input}\",\"shape\":{},\"datatype\":\"{}\",\"data\":{}}}]{outputs}}}",
                    shape_json(&tensor.shape),
                    tensor.datatype,
                    json_array(&tensor.json, nested)
                );
                (infer, json, body.into_bytes())
            }
            Protocol::V2Binary => {
                let header = format!(
                    "{{\"inputs\":[{{\"name\":\"{input}\",\"shape\":{},\"datatype\":\"{}\",\"parameters\":{{\"binary_data_size\":{}}}}}],\"parameters\":{{\"binary_data_output\":true}}}}",
                    shape_json(&tensor.shape),
                    tensor.datatype,
                    tensor.raw.len()
                );
                let headers = format!(
                    "Inference-Header-Content-Length: {}\r\nContent-Type: application/octet-stream\r\n",
                    header.len()
                );
                let mut body = header.into_bytes();
                body.extend_from_slice(&tensor.raw);
                (infer, headers, body)
            }
            Protocol::V2Raw => (
                infer,
                "Inference-Header-Content-Length: 0\r\nContent-Type: application/octet-stream\r\n"
                    .to_owned(),
                tensor.raw,
            ),
            Protocol::TfServing => (
                format!("/v1/models/{model}:predict"),
                json,
                format!(
                    "{{\"instances\":{}}}",
                    json_array(&tensor.json, Some(width))
                )
                .into_bytes(),
            ),
            Protocol::Clipper => {
                let body = if rows == 1 {
                    format!("{{\"input\":{}}}", json_array(&tensor.json, None))
                } else {
                    format!(
                        "{{\"input_batch\":{}}}",
                        json_array(&tensor.json, Some(width))
                    )
                };
                (format!("/{model}/predict"), json, body.into_bytes())
            }
            Protocol::Grpc | Protocol::Get => unreachable!("handled above"),
        };
        Ok(("POST", path, headers, Some(body.into())))
    }

    fn grpc(&self) -> anyhow::Result<pb::ModelInferRequest> {
        if matches!(self.payload, Payload::File(_)) {
            bail!("gRPC runs send generated tensors; a body file is HTTP only");
        }
        let tensor = self.values()?.tensor();
        Ok(pb::ModelInferRequest {
            model_name: self.model.clone(),
            inputs: vec![pb::model_infer_request::InferInputTensor {
                name: self.input.clone(),
                datatype: tensor.datatype.to_owned(),
                shape: tensor.shape.iter().map(|&d| d as i64).collect(),
                ..Default::default()
            }],
            raw_input_contents: vec![tensor.raw.into()],
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(request: &Request) -> (String, Vec<u8>) {
        let Request::Http(r) = request else {
            panic!("not HTTP")
        };
        (String::from_utf8(r.head.to_vec()).unwrap(), r.body.concat())
    }

    #[test]
    fn v2_json_bodies_parse_and_carry_the_tensor() {
        for floats in [Floats::Long, Floats::Short] {
            let w = Workload::new(
                Protocol::V2Json,
                "identity_fp32",
                "input",
                Payload::Tensor(Values::Fp32 {
                    shape: [2, 3],
                    floats,
                }),
            );
            let (head, body) = body(&w.build().unwrap());
            assert!(head.starts_with("POST /v2/models/identity_fp32/infer HTTP/1.1\r\n"));
            assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())));
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let data = v["inputs"][0]["data"].as_array().unwrap();
            assert_eq!(data.len(), 6);
            assert_eq!(v["inputs"][0]["shape"], serde_json::json!([2, 3]));
            // Each value is an f32 in [0, 1): long, the exact decimal of the
            // widened f32 as Python prints it; short, the f32's shortest text.
            for x in data {
                let text = x.to_string();
                let v32: f32 = text.parse().unwrap();
                assert!((0.0..1.0).contains(&v32));
                match floats {
                    Floats::Long => assert_eq!(text.parse::<f64>().unwrap(), v32 as f64, "{text}"),
                    Floats::Short => assert_eq!(text, ryu::Buffer::new().format(v32), "{text}"),
                }
            }
        }
    }

    #[test]
    fn the_binary_extension_header_counts_the_raw_bytes() {
        let w = Workload::new(
            Protocol::V2Binary,
            "titanic",
            "features",
            Payload::Tensor(Values::Titanic { rows: 3 }),
        );
        let (head, body) = body(&w.build().unwrap());
        let header_len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Inference-Header-Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        let header: serde_json::Value = serde_json::from_slice(&body[..header_len]).unwrap();
        assert_eq!(
            header["inputs"][0]["parameters"]["binary_data_size"],
            3 * 12 * 4
        );
        assert_eq!(body.len() - header_len, 3 * 12 * 4);
        let first = f32::from_le_bytes(body[header_len..header_len + 4].try_into().unwrap());
        assert_eq!(first, TITANIC_ROWS[0][0]);
    }

    #[test]
    fn chunked_bodies_join_back_to_the_body() {
        let mut w = Workload::new(
            Protocol::V2Json,
            "identity_fp32",
            "input",
            Payload::Tensor(Values::Fp32 {
                shape: [1, 100],
                floats: Floats::Short,
            }),
        );
        let (_, plain) = body(&w.build().unwrap());
        w.segments = 16;
        let (head, chunked) = body(&w.build().unwrap());
        assert!(head.contains("Transfer-Encoding: chunked"));
        // Undo the chunk framing.
        let mut rest = &chunked[..];
        let mut joined = Vec::new();
        let mut pieces = 0;
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
            rest = &rest[line_end + 2..];
            if size == 0 {
                break;
            }
            joined.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
            pieces += 1;
        }
        assert_eq!(joined, plain);
        assert_eq!(pieces, 16);
    }

    #[test]
    fn tf_serving_and_clipper_bodies_have_their_shapes() {
        let rows = |p| {
            Workload::new(
                p,
                "titanic",
                "features",
                Payload::Tensor(Values::Titanic { rows: 2 }),
            )
        };
        let (head, b) = body(&rows(Protocol::TfServing).build().unwrap());
        assert!(head.starts_with("POST /v1/models/titanic:predict "));
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["instances"].as_array().unwrap().len(), 2);
        assert_eq!(v["instances"][1].as_array().unwrap().len(), 12);
        let (head, b) = body(&rows(Protocol::Clipper).build().unwrap());
        assert!(head.starts_with("POST /titanic/predict "));
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["input_batch"].as_array().unwrap().len(), 2);
        let one = Workload::new(
            Protocol::Clipper,
            "titanic",
            "features",
            Payload::Tensor(Values::Titanic { rows: 1 }),
        );
        let v: serde_json::Value = serde_json::from_slice(&body(&one.build().unwrap()).1).unwrap();
        assert_eq!(v["input"].as_array().unwrap().len(), 12);
    }

    #[test]
    fn grpc_messages_carry_raw_contents() {
        let w = Workload::new(
            Protocol::Grpc,
            "identity_bytes",
            "input",
            Payload::Tensor(Values::Bytes { len: 5 }),
        );
        let Request::Grpc(m) = w.build().unwrap() else {
            panic!()
        };
        assert_eq!(m.inputs[0].datatype, "BYTES");
        assert_eq!(&m.raw_input_contents[0][..], b"\x05\x00\x00\x00abcde");
    }
}
