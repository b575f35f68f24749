//! Random valid requests, rendered with random key order, whitespace,
//! nesting and number style, decoded in random chunkings, must give exactly
//! the tensors an independent reference gives: `str::parse` for floats,
//! serde_json for strings, and exact values for FP16/BF16.

use half::{bf16, f16};
use proptest::prelude::*;
use wirespeed_core::{CpuPool, DataType, InferRequest, ParameterValue, TensorData};
use wirespeed_json::{DecodeOptions, RequestDecoder};

/// One tensor: the JSON text of each element and the value it must decode to.
#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    texts: Vec<String>,
    expected: TensorData,
}

fn float_text(bits: u32, style: u8) -> (String, f32) {
    let f = f32::from_bits(bits);
    let f = if f.is_finite() { f } else { 1.5 };
    let text = match style {
        // json.dumps of a float32 widened to float64.
        0 => format!("{:?}", f64::from(f)),
        // A short 4-decimal style.
        1 => format!("{:.4}", f64::from(f).clamp(-1e6, 1e6)),
        // An exponent form.
        _ => format!("{:e}", f64::from(f)),
    };
    let expected = text.parse::<f32>().unwrap();
    (text, expected)
}

fn tensor(datatype: DataType) -> BoxedStrategy<Case> {
    let shape = prop::collection::vec(0usize..4, 0..4);
    shape
        .prop_flat_map(move |shape| {
            let n: usize = shape.iter().product();
            let elements = match datatype {
                DataType::Fp32 => prop::collection::vec((any::<u32>(), 0u8..3), n)
                    .prop_map(|v| {
                        let (texts, values): (Vec<_>, Vec<_>) =
                            v.into_iter().map(|(b, s)| float_text(b, s)).unzip();
                        (texts, TensorData::Fp32(values))
                    })
                    .boxed(),
                DataType::Fp64 => {
                    prop::collection::vec(any::<f64>().prop_filter("finite", |x| x.is_finite()), n)
                        .prop_map(|v| {
                            (
                                v.iter().map(|x| format!("{x:?}")).collect(),
                                TensorData::Fp64(v),
                            )
                        })
                        .boxed()
                }
                DataType::Fp16 => prop::collection::vec(any::<u16>(), n)
                    .prop_map(|v| {
                        let v: Vec<f16> = v
                            .into_iter()
                            .map(f16::from_bits)
                            .map(|h| if h.is_finite() { h } else { f16::ONE })
                            .collect();
                        (
                            v.iter().map(|h| format!("{:?}", h.to_f32())).collect(),
                            TensorData::Fp16(v),
                        )
                    })
                    .boxed(),
                DataType::Bf16 => prop::collection::vec(any::<u16>(), n)
                    .prop_map(|v| {
                        let v: Vec<bf16> = v
                            .into_iter()
                            .map(bf16::from_bits)
                            .map(|h| if h.is_finite() { h } else { bf16::ONE })
                            .collect();
                        (
                            v.iter().map(|h| format!("{:?}", h.to_f32())).collect(),
                            TensorData::Bf16(v),
                        )
                    })
                    .boxed(),
                DataType::Int8 => prop::collection::vec(any::<i8>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Int8(v)))
                    .boxed(),
                DataType::Int16 => prop::collection::vec(any::<i16>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Int16(v)))
                    .boxed(),
                DataType::Int32 => prop::collection::vec(any::<i32>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Int32(v)))
                    .boxed(),
                DataType::Int64 => prop::collection::vec(any::<i64>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Int64(v)))
                    .boxed(),
                DataType::Uint8 => prop::collection::vec(any::<u8>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Uint8(v)))
                    .boxed(),
                DataType::Uint16 => prop::collection::vec(any::<u16>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Uint16(v)))
                    .boxed(),
                DataType::Uint32 => prop::collection::vec(any::<u32>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Uint32(v)))
                    .boxed(),
                DataType::Uint64 => prop::collection::vec(any::<u64>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Uint64(v)))
                    .boxed(),
                DataType::Bool => prop::collection::vec(any::<bool>(), n)
                    .prop_map(|v| (texts(&v), TensorData::Bool(v)))
                    .boxed(),
                DataType::Bytes => prop::collection::vec(json_string(), n)
                    .prop_map(|v| {
                        // serde_json is the reference for what each literal decodes to.
                        let bytes = v
                            .iter()
                            .map(|lit| serde_json::from_str::<String>(lit).unwrap().into_bytes())
                            .collect();
                        (v, TensorData::Bytes(bytes))
                    })
                    .boxed(),
            };
            (Just(shape), elements)
        })
        .prop_map(|(shape, (texts, expected))| Case {
            shape,
            texts,
            expected,
        })
        .boxed()
}

fn texts<T: ToString>(v: &[T]) -> Vec<String> {
    v.iter().map(T::to_string).collect()
}

/// A JSON string literal with escapes and unicode, written in varied ways.
fn json_string() -> impl Strategy<Value = String> {
    prop::collection::vec((any::<char>(), 0u8..4), 0..12).prop_map(|chars| {
        let mut lit = String::from("\"");
        for (c, style) in chars {
            match (c, style) {
                ('"', _) => lit.push_str("\\\""),
                ('\\', _) => lit.push_str("\\\\"),
                (c, _) if (c as u32) < 0x20 => lit.push_str(&format!("\\u{:04x}", c as u32)),
                (c, 0) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        lit.push_str(&format!("\\u{unit:04X}"));
                    }
                }
                ('/', 1) => lit.push_str("\\/"),
                (c, _) => lit.push(c),
            }
        }
        lit.push('"');
        lit
    })
}

/// Random whitespace.
fn ws(seed: &mut u64) -> &'static str {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    [" ", "", "", "\n  ", "\t", "\r\n"][(*seed >> 60) as usize % 6]
}

/// Renders `data` flat or nested to the shape.
fn render_data(case: &Case, nested: bool, seed: &mut u64) -> String {
    fn level(shape: &[usize], texts: &mut std::slice::Iter<'_, String>, seed: &mut u64) -> String {
        let items: Vec<String> = match shape {
            [] => return texts.next().cloned().unwrap_or_default(),
            [n, rest @ ..] => (0..*n).map(|_| level(rest, texts, seed)).collect(),
        };
        format!(
            "[{}{}{}]",
            ws(seed),
            items.join(&format!(",{}", ws(seed))),
            ws(seed)
        )
    }
    if nested && !case.shape.is_empty() {
        level(&case.shape, &mut case.texts.iter(), seed)
    } else {
        format!(
            "[{}]",
            case.texts.join(&format!("{},{}", ws(seed), ws(seed)))
        )
    }
}

fn shuffle<T>(items: &mut [T], seed: &mut u64) {
    for i in (1..items.len()).rev() {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        items.swap(i, (*seed >> 33) as usize % (i + 1));
    }
}

fn render_request(
    cases: &[(String, DataType, Case)],
    nested: bool,
    id: &str,
    seed: &mut u64,
) -> String {
    let inputs: Vec<String> = cases
        .iter()
        .map(|(name, dt, case)| {
            let shape: Vec<String> = case.shape.iter().map(ToString::to_string).collect();
            let mut fields = vec![
                format!(
                    "\"name\":{}{}",
                    ws(seed),
                    serde_json::to_string(name).unwrap()
                ),
                format!("\"datatype\"{}:\"{}\"", ws(seed), dt),
                format!("\"shape\":[{}]", shape.join(",")),
                format!("\"data\":{}", render_data(case, nested, seed)),
                "\"parameters\":{\"binary_data\":false,\"k\":1.5,\"s\":\"v\"}".to_owned(),
                "\"ignored\":{\"a\":[1,{\"b\":\"x\\\"y\"},null,-2e5,true]}".to_owned(),
            ];
            shuffle(&mut fields, seed);
            format!(
                "{{{}{}{}}}",
                ws(seed),
                fields.join(&format!(",{}", ws(seed))),
                ws(seed)
            )
        })
        .collect();
    let mut top = vec![
        format!("\"id\":{}", serde_json::to_string(id).unwrap()),
        format!("\"inputs\":[{}]", inputs.join(",")),
        "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}]".to_owned(),
        "\"parameters\":{\"priority\":2,\"flag\":false}".to_owned(),
        "\"unknown\":[[[]],{}]".to_owned(),
    ];
    shuffle(&mut top, seed);
    format!(
        "{}{{{}}}{}",
        ws(seed),
        top.join(&format!(",{}", ws(seed))),
        ws(seed)
    )
}

fn decode_in_chunks(body: &[u8], splits: &[usize]) -> InferRequest {
    let mut decoder = RequestDecoder::new(DecodeOptions::default());
    let mut start = 0;
    let mut points: Vec<usize> = splits.iter().map(|s| s % (body.len() + 1)).collect();
    points.sort_unstable();
    for p in points.into_iter().chain([body.len()]) {
        decoder
            .feed(&body[start..p])
            .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(body)));
        start = p;
    }
    decoder
        .finish()
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(body)))
}

fn datatype() -> impl Strategy<Value = DataType> {
    prop::sample::select(DataType::ALL.to_vec())
}

fn same(a: &TensorData, b: &TensorData) -> bool {
    // Compare floats by bits so -0.0 and 0.0 are told apart.
    match (a, b) {
        (TensorData::Fp32(x), TensorData::Fp32(y)) => x
            .iter()
            .map(|v| v.to_bits())
            .eq(y.iter().map(|v| v.to_bits())),
        (TensorData::Fp64(x), TensorData::Fp64(y)) => x
            .iter()
            .map(|v| v.to_bits())
            .eq(y.iter().map(|v| v.to_bits())),
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn decodes_like_the_reference_in_any_chunking(
        cases in prop::collection::vec(datatype().prop_flat_map(|dt| (Just(dt), tensor(dt))), 1..4),
        nested in any::<bool>(),
        seed in any::<u64>(),
        splits in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let named: Vec<(String, DataType, Case)> =
            cases.into_iter().enumerate().map(|(i, (dt, c))| (format!("in\u{e9}{i}"), dt, c)).collect();
        let mut seed = seed;
        let body = render_request(&named, nested, "req-\"1\"", &mut seed);
        // The renderer writes valid JSON: serde_json agrees.
        prop_assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok(), "{}", body);

        for request in [decode_in_chunks(body.as_bytes(), &splits), decode_in_chunks(body.as_bytes(), &(0..body.len()).collect::<Vec<_>>())] {
            prop_assert_eq!(request.id.as_deref(), Some("req-\"1\""));
            prop_assert_eq!(request.inputs.len(), named.len());
            for (tensor, (name, dt, case)) in request.inputs.iter().zip(&named) {
                prop_assert_eq!(&tensor.name, name);
                prop_assert_eq!(tensor.datatype(), *dt);
                prop_assert_eq!(&tensor.shape, &case.shape);
                prop_assert!(same(&tensor.data, &case.expected), "{:?} != {:?}\n{}", tensor.data, case.expected, body);
            }
            prop_assert_eq!(request.outputs.len(), 1);
            prop_assert_eq!(&request.outputs[0].name, "y");
            prop_assert_eq!(&request.outputs[0].parameters, &vec![("binary_data".to_owned(), ParameterValue::Bool(true))]);
            prop_assert_eq!(&request.parameters, &vec![("priority".to_owned(), ParameterValue::Int(2)), ("flag".to_owned(), ParameterValue::Bool(false))]);
        }
    }
}

#[test]
fn non_finite_tokens_decode_for_float_types() {
    let body = br#"{"inputs":[{"name":"x","shape":[3],"datatype":"FP32","data":[NaN,Infinity,-Infinity]},
                              {"name":"y","shape":[3],"datatype":"FP16","data":[NaN,Infinity,-Infinity]}]}"#;
    for size in 1..body.len() {
        let mut d = RequestDecoder::new(DecodeOptions::default());
        body.chunks(size).for_each(|c| d.feed(c).unwrap());
        let r = d.finish().unwrap();
        let TensorData::Fp32(x) = &r.inputs[0].data else {
            panic!()
        };
        assert!(x[0].is_nan() && x[1] == f32::INFINITY && x[2] == f32::NEG_INFINITY);
        let TensorData::Fp16(y) = &r.inputs[1].data else {
            panic!()
        };
        assert!(y[0].is_nan() && y[1] == f16::INFINITY && y[2] == f16::NEG_INFINITY);
    }
}

#[test]
fn decimals_that_expose_double_rounding_round_once() {
    // Each is within a hair of an f32 midpoint; via f64 they round to the
    // midpoint and then tie to even, the wrong way.
    let texts = [
        "0.500000029802322387695312500000000000000000000000000000000000000000000000000000000001",
        "1.00000005960464477539062500000000001",
        "-1.00000005960464477539062500000000001",
        "16777217.0000000000000000000001",
    ];
    let data = texts.join(",");
    let body =
        format!(r#"{{"inputs":[{{"name":"x","shape":[4],"datatype":"FP32","data":[{data}]}}]}}"#);
    let request =
        wirespeed_json::decode_infer_request(body.as_bytes(), &DecodeOptions::default()).unwrap();
    let TensorData::Fp32(x) = &request.inputs[0].data else {
        panic!()
    };
    for (got, text) in x.iter().zip(texts) {
        let exact = text.parse::<f32>().unwrap();
        assert_eq!(got.to_bits(), exact.to_bits(), "{text}");
        assert_ne!(
            (text.parse::<f64>().unwrap() as f32).to_bits(),
            exact.to_bits(),
            "{text} must expose double rounding"
        );
    }
}

/// A large FP32 or FP64 body, flat or nested [rows, n], long or short floats.
fn large_body(datatype: &str, rows: usize, n: usize, nested: bool, long: bool) -> String {
    let value = |i: usize| {
        let x = ((i as f64) * 0.618).sin() * 2.0;
        if long {
            format!("{:?}", f64::from(x as f32))
        } else {
            format!("{:.4}", x)
        }
    };
    let data = if nested {
        let rows: Vec<String> = (0..rows)
            .map(|r| {
                format!(
                    "[{}]",
                    (0..n)
                        .map(|c| value(r * n + c))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        format!("[{}]", rows.join(", "))
    } else {
        format!(
            "[{}]",
            (0..rows * n).map(value).collect::<Vec<_>>().join(", ")
        )
    };
    format!(
        r#"{{"inputs": [{{"name": "x", "shape": [{rows}, {n}], "datatype": "{datatype}", "data": {data}}}]}}"#
    )
}

fn decode_with(
    body: &[u8],
    threads: usize,
    chunk: usize,
) -> Result<InferRequest, wirespeed_json::DecodeError> {
    // This thread and `threads - 1` helpers.
    let options = DecodeOptions {
        pool: (threads > 1).then(|| CpuPool::new(threads - 1).unwrap()),
        ..DecodeOptions::default()
    };
    let mut decoder = RequestDecoder::new(options).with_body_len(body.len() as u64);
    for piece in body.chunks(chunk) {
        decoder.feed(piece)?;
    }
    decoder.finish()
}

#[test]
fn parallel_decoding_is_bit_identical_to_sequential() {
    for (datatype, nested, long) in [
        ("FP32", false, true),
        ("FP32", true, false),
        ("FP64", false, true),
        ("FP64", true, true),
    ] {
        let body = large_body(datatype, 4, 40_000, nested, long);
        let sequential = decode_with(body.as_bytes(), 1, body.len()).unwrap();
        for (threads, chunk) in [(2, body.len()), (3, body.len()), (2, 300_001), (2, 1 << 20)] {
            let parallel = decode_with(body.as_bytes(), threads, chunk).unwrap();
            assert!(
                same(&parallel.inputs[0].data, &sequential.inputs[0].data),
                "{datatype} nested={nested} threads={threads} chunk={chunk}"
            );
        }
    }
}

#[test]
fn an_error_inside_a_parallel_run_is_reported_as_sequentially() {
    let good = large_body("FP32", 2, 50_000, false, true);
    for bad in ["01", "1.", "\"s\"", "[1]", "true"] {
        let at = good.len() / 2;
        let cut = at + good[at..].find(", ").unwrap() + 2;
        let body = format!("{}{bad}, {}", &good[..cut], &good[cut..]);
        let sequential = decode_with(body.as_bytes(), 1, body.len()).unwrap_err();
        let parallel = decode_with(body.as_bytes(), 2, body.len()).unwrap_err();
        assert_eq!(
            (parallel.category(), parallel.offset()),
            (sequential.category(), sequential.offset()),
            "{bad}: {parallel}"
        );
        assert_eq!(parallel.offset(), cut as u64, "{bad}: {parallel}");
    }
}
