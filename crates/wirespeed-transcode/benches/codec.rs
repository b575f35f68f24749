//! The codecs in-process on the dimensions grpc-httpjson-transcoding
//! publishes its cost along, in its units: microseconds per byte of JSON
//! (and per message), medians of repeated timed runs.
//!
//!   cargo bench -p wirespeed-transcode --bench codec
//!
//! Each case prints the JSON body's size, the median time per message of
//! JSON to protobuf and of protobuf to JSON, and both per JSON byte.
//! `CODEC_CASE=double` runs only the cases whose name has that text.

use std::hint::black_box;
use std::time::{Duration, Instant};

use prost_reflect::{DescriptorPool, MessageDescriptor};
use wirespeed_transcode::{
    bound_fields, proto_to_json, EncodeOptions, JsonToProto, PrintOptions, Routes,
};

fn pool() -> DescriptorPool {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    let files = protox::compile(["everything.proto"], [dir]).expect("the test protos compile");
    DescriptorPool::from_file_descriptor_set(files).expect("a pool")
}

/// The median of `rounds` timings of `f`, each run enough times to last
/// about 20 ms.
fn median(mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    f();
    let once = start.elapsed().max(Duration::from_nanos(50));
    let reps = (Duration::from_millis(20).as_nanos() / once.as_nanos()).clamp(1, 1_000_000) as u32;
    let mut times: Vec<Duration> = (0..9)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..reps {
                f();
            }
            start.elapsed() / reps
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Whether case `name` runs: `CODEC_CASE=text` runs only the cases whose
/// name has it.
fn wanted(name: &str) -> bool {
    std::env::var("CODEC_CASE").map_or(true, |only| name.contains(&only))
}

fn case(name: &str, desc: &MessageDescriptor, json: &str, segments: usize) {
    if !wanted(name) {
        return;
    }
    let body = json.as_bytes();
    let chunk = body.len().div_ceil(segments).max(1);
    let encode = || {
        let mut encoder = JsonToProto::new(desc.clone(), EncodeOptions::default());
        for piece in body.chunks(chunk) {
            encoder.feed(piece).unwrap();
        }
        encoder.finish().unwrap()
    };
    let bytes = encode();
    let to_proto = median(|| {
        black_box(encode());
    });
    let mut out = Vec::with_capacity(body.len() * 2);
    let to_json = median(|| {
        out.clear();
        proto_to_json(desc, black_box(&bytes), &PrintOptions::default(), &mut out).unwrap();
    });
    let per_byte = |d: Duration| d.as_secs_f64() * 1e6 / body.len() as f64;
    println!(
        "{name:<34} {:>10} B  JSON->proto {:>10.2} us {:>9.5} us/B   proto->JSON {:>10.2} us {:>9.5} us/B",
        body.len(),
        to_proto.as_secs_f64() * 1e6,
        per_byte(to_proto),
        to_json.as_secs_f64() * 1e6,
        per_byte(to_json),
    );
}

fn main() {
    let pool = pool();
    let everything = pool
        .get_message_by_name("wirespeed.test.Everything")
        .unwrap();
    let inner = pool.get_message_by_name("wirespeed.test.Inner").unwrap();
    let ints = |n: usize| -> String {
        let values: Vec<String> = (0..n)
            .map(|i| ((i * 7919) % 2_000_003).to_string())
            .collect();
        format!(r#"{{"rInt32": [{}]}}"#, values.join(","))
    };
    println!("-- int32 array length");
    for n in [1, 256, 1024, 16384] {
        case(&format!("int32 x {n}"), &everything, &ints(n), 1);
    }
    println!("-- value type, 1024 zeros");
    let zeros = |item: &str| vec![item; 1024].join(",");
    case(
        "int32",
        &everything,
        &format!(r#"{{"rInt32": [{}]}}"#, zeros("0")),
        1,
    );
    case(
        "double",
        &everything,
        &format!(r#"{{"rDouble": [{}]}}"#, zeros("0")),
        1,
    );
    case(
        "string",
        &everything,
        &format!(r#"{{"rString": [{}]}}"#, zeros("\"0\"")),
        1,
    );
    println!("-- 1024 values as Python's json.dumps writes them");
    let doubles: Vec<String> = (0..1024).map(|i| format!("{:?}", i as f64 / 7.0)).collect();
    case(
        "double, 17 digits",
        &everything,
        &format!(r#"{{"rDouble": [{}]}}"#, doubles.join(", ")),
        1,
    );
    let floats: Vec<String> = (0..1024).map(|i| format!("{:?}", i as f32 / 7.0)).collect();
    case(
        "float, 9 digits",
        &everything,
        &format!(r#"{{"rFloat": [{}]}}"#, floats.join(", ")),
        1,
    );
    let strings: Vec<String> = (0..1024).map(|i| format!("\"value{i}\"")).collect();
    case(
        "string, value{i}",
        &everything,
        &format!(r#"{{"rString": [{}]}}"#, strings.join(", ")),
        1,
    );
    println!("-- bytes body");
    for n in [1usize, 1024, 1 << 20, 32 << 20] {
        if !wanted(&format!("bytes {n} B")) {
            continue;
        }
        let payload: Vec<u8> = (0..n).map(|i| (i * 31) as u8).collect();
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &payload);
        case(
            &format!("bytes {n} B"),
            &everything,
            &format!(r#"{{"fBytes": "{b64}"}}"#),
            1,
        );
    }
    println!("-- segments of a 1 MiB message");
    let mut megabyte = ints(1);
    let mut n = 1;
    while megabyte.len() < 1 << 20 {
        n *= 2;
        megabyte = ints(n);
    }
    for segments in [1, 16, 256, 4096] {
        case(
            &format!("{segments} segments"),
            &everything,
            &megabyte,
            segments,
        );
    }
    println!("-- nesting");
    for depth in [0usize, 1, 8, 31] {
        let json = "{\"children\":[".repeat(depth) + r#"{"a":1,"b":"x"}"# + &"]}".repeat(depth);
        case(&format!("Inner depth {depth}"), &inner, &json, 1);
        let st = "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth);
        case(
            &format!("Struct depth {depth}"),
            &everything,
            &format!(r#"{{"st": {{"v": {st}}}}}"#),
            1,
        );
    }
    println!("-- bindings: the route found and its path variables written");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/protos");
    // Encoded and decoded again, so the rules' options keep their bytes.
    let mut compiler = protox::Compiler::new([dir]).expect("a compiler");
    compiler.include_imports(true);
    compiler
        .open_file("bench.proto")
        .expect("bench.proto compiles");
    let bench =
        DescriptorPool::decode(compiler.encode_file_descriptor_set().as_slice()).expect("a pool");
    let routes = Routes::from_pool(&bench, &[]).expect("the routes");
    for (name, path) in [
        ("bindings 1, depth 0", "/v1/one/s1"),
        ("bindings 2, depth 0", "/v1/shelves/s1/books/b1"),
        ("bindings 8, depth 0", "/v1/many/a/b/c/d/e/f/g/h"),
        ("binding depth 1", "/v1/depth1/abc"),
        ("binding depth 8", "/v1/deep/abc"),
        ("binding depth 32", "/v1/depth32/abc"),
    ] {
        if !wanted(name) {
            continue;
        }
        let time = median(|| {
            let found = routes.find("GET", black_box(path)).expect("a route");
            black_box(bound_fields(&found, None, EncodeOptions::default(), false).unwrap());
        });
        println!(
            "{name:<36} {:>8} us per request",
            format!("{:.3}", time.as_secs_f64() * 1e6)
        );
    }
}
