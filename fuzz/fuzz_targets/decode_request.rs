//! Random bytes and random chunkings through the push decoder. Checks:
//! no panic; any chunking gives the same result as one chunk; and when the
//! decoder accepts a body, serde_json parses it too and the tensors equal a
//! straightforward conversion of serde_json's values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use wirespeed_core::{DataType, InferRequest, TensorData};
use wirespeed_json::{DecodeError, DecodeOptions, RequestDecoder};

fn decode(body: &[u8], cuts: &[usize]) -> Result<InferRequest, DecodeError> {
    let mut decoder = RequestDecoder::new(DecodeOptions::default());
    let mut start = 0;
    for &cut in cuts.iter().chain([&body.len()]) {
        let end = cut.clamp(start, body.len());
        decoder.feed(&body[start..end])?;
        start = end;
    }
    decoder.finish()
}

/// The reference: serde_json's value of one input's `data`, flattened and
/// converted by datatype.
fn reference(data: &Value, datatype: DataType) -> Option<TensorData> {
    fn flatten<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
            other => out.push(other),
        }
    }
    let mut leaves = Vec::new();
    flatten(data, &mut leaves);
    let text = |v: &Value| match v {
        Value::Number(n) => Some(n.as_str().to_owned()),
        _ => None,
    };
    macro_rules! ints {
        ($variant:ident, $t:ty) => {
            TensorData::$variant(leaves.iter().map(|v| text(v)?.parse::<$t>().ok()).collect::<Option<Vec<_>>>()?)
        };
    }
    Some(match datatype {
        DataType::Fp32 => TensorData::Fp32(leaves.iter().map(|v| text(v)?.parse::<f32>().ok()).collect::<Option<_>>()?),
        DataType::Fp64 => TensorData::Fp64(leaves.iter().map(|v| text(v)?.parse::<f64>().ok()).collect::<Option<_>>()?),
        DataType::Int8 => ints!(Int8, i8),
        DataType::Int16 => ints!(Int16, i16),
        DataType::Int32 => ints!(Int32, i32),
        DataType::Int64 => ints!(Int64, i64),
        DataType::Uint8 => ints!(Uint8, u8),
        DataType::Uint16 => ints!(Uint16, u16),
        DataType::Uint32 => ints!(Uint32, u32),
        DataType::Uint64 => ints!(Uint64, u64),
        DataType::Bool => TensorData::Bool(leaves.iter().map(|v| v.as_bool()).collect::<Option<_>>()?),
        DataType::Bytes => {
            TensorData::Bytes(leaves.iter().map(|v| v.as_str().map(|s| s.as_bytes().to_vec())).collect::<Option<_>>()?)
        }
        // FP16/BF16 have no independent parser to compare with here; the
        // unit tests pin their rounding.
        DataType::Fp16 | DataType::Bf16 => return None,
    })
}

fn same(a: &TensorData, b: &TensorData) -> bool {
    match (a, b) {
        (TensorData::Fp32(x), TensorData::Fp32(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
        (TensorData::Fp64(x), TensorData::Fp64(y)) => x.iter().map(|v| v.to_bits()).eq(y.iter().map(|v| v.to_bits())),
        _ => a == b,
    }
}

fuzz_target!(|input: &[u8]| {
    let (seed, body) = match input.split_first() {
        Some((&seed, body)) => (seed, body),
        None => return,
    };
    let whole = decode(body, &[]);
    // Cuts spread by the seed, down to single bytes.
    let step = usize::from(seed % 17) + 1;
    let cuts: Vec<usize> = (step..body.len()).step_by(step).collect();
    let chunked = decode(body, &cuts);
    match (&whole, &chunked) {
        (Ok(a), Ok(b)) => assert!(
            a.inputs.len() == b.inputs.len() && a.inputs.iter().zip(&b.inputs).all(|(x, y)| x.name == y.name && x.shape == y.shape && same(&x.data, &y.data)),
            "chunking changed the result"
        ),
        (Err(a), Err(b)) => assert_eq!((a.category(), a.offset()), (b.category(), b.offset()), "chunking changed the error: {a} / {b}"),
        _ => panic!("chunking changed success: {whole:?} / {chunked:?}"),
    }

    let Ok(request) = whole else { return };
    if body.windows(3).any(|w| w == b"NaN") || body.windows(8).any(|w| w == b"Infinity") {
        return; // not JSON, so serde_json is no reference
    }
    let value: Value = serde_json::from_slice(body).expect("the decoder accepted what serde_json refuses");
    let inputs = value["inputs"].as_array().expect("accepted without an inputs array");
    assert_eq!(inputs.len(), request.inputs.len());
    for (tensor, json) in request.inputs.iter().zip(inputs) {
        assert_eq!(json["name"].as_str(), Some(tensor.name.as_str()));
        if let Some(expected) = reference(&json["data"], tensor.datatype()) {
            assert!(same(&tensor.data, &expected), "{:?} != {:?}", tensor.data, expected);
        }
    }
});
