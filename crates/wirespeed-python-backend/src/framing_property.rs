//! The worker's framing driven from both ends at once: this side's
//! `wire.rs` against the worker's own `channel.py`, run by a real Python
//! (`WIRESPEED_PYTHON`, or `python3`). The peer's threads send BLS calls
//! and decoupled responses of random sizes while this side answers the
//! calls and sends cancels from threads of its own; every frame must be
//! read whole, in its own place, its payload byte for byte what was sent.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use serde_json::{json, Value};

use super::wire::{receive_frame, send_frame};

/// The peer: `channel.py` as the worker has it, then a loop that answers
/// as a model's threads do.
const PEER: &str = r#"
import json, sys, threading

def pattern(seed, n):
    block = bytes((i * 7 + seed) % 251 for i in range(251))
    return memoryview(block * (n // 251 + 1))[:n]

channel = Channel(3)
plan = channel.recv()
calls, responses = plan["calls"], plan["responses"]

def send_responses():
    for i, size in enumerate(responses):
        channel.send({"op": "response", "id": i, "final": False,
                      "outputs": [["y", "UINT8", [size], 0, size]]}, pattern(1000 + i, size))

def send_calls():
    for i, (size, _) in enumerate(calls):
        channel.send({"op": "bls", "model": "m", "call": i,
                      "inputs": [["x", "UINT8", [size], 0, size]]}, [pattern(2000 + i, size)])

threads = [threading.Thread(target=send_responses), threading.Thread(target=send_calls)]
for t in threads:
    t.start()
answered, wrong, cancels = 0, [], 0
while True:
    message = channel.recv()
    op = message["op"]
    if op == "bls_result":
        i = message["call"]
        got = memoryview(message.get(PAYLOAD, b""))
        if got != pattern(3000 + i, calls[i][1]):
            wrong.append(i)
        answered += 1
    elif op == "cancel":
        cancels += 1
    elif op == "stop":
        break
for t in threads:
    t.join()
channel.send({"op": "summary", "answered": answered, "wrong": wrong, "cancels": cancels})
"#;

/// Bytes `seed` of length `n`, as the peer makes them: no two frames
/// alike, and a shift within one seen.
fn pattern(seed: usize, n: usize) -> Vec<u8> {
    let block = block(seed);
    let mut bytes = Vec::with_capacity(n + block.len());
    while bytes.len() < n {
        bytes.extend_from_slice(&block);
    }
    bytes.truncate(n);
    bytes
}

fn block(seed: usize) -> Vec<u8> {
    (0..251).map(|i| ((i * 7 + seed) % 251) as u8).collect()
}

/// Whether `payload` is `pattern(seed, n)`, read in place.
fn matches(payload: &[u8], seed: usize, n: usize) -> bool {
    let block = block(seed);
    payload.len() == n
        && payload
            .chunks(block.len())
            .all(|chunk| chunk == &block[..chunk.len()])
}

fn peer() -> (Child, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let python = std::env::var("WIRESPEED_PYTHON").unwrap_or_else(|_| "python3".into());
    let program = format!("{}\n{PEER}", include_str!("channel.py"));
    let fd = theirs.as_raw_fd();
    let mut command = Command::new(python);
    command
        .arg("-c")
        .arg(program)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: dup2 between fork and exec, async-signal-safe.
    #[allow(unsafe_code)]
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().unwrap();
    drop(theirs);
    (child, ours)
}

/// Runs one exchange: the peer's `calls` (size sent, size answered) and
/// `responses`, this side's `cancels`, all at once.
fn exchange(calls: &[(usize, usize)], responses: &[usize], cancels: usize) {
    let (mut child, socket) = peer();
    let writer = Arc::new(Mutex::new(socket.try_clone().unwrap()));
    let mut reader = socket;
    send_frame(
        &mut writer.lock().unwrap(),
        &json!({"op": "plan", "calls": calls, "responses": responses}),
        &[] as &[&[u8]],
    )
    .unwrap();
    let canceller = {
        let writer = Arc::clone(&writer);
        std::thread::spawn(move || {
            for id in 0..cancels {
                send_frame(
                    &mut writer.lock().unwrap(),
                    &json!({"op": "cancel", "id": id}),
                    &[] as &[&[u8]],
                )
                .unwrap();
                std::thread::yield_now();
            }
        })
    };
    let (mut seen_calls, mut seen_responses) = (vec![false; calls.len()], vec![0usize; 0]);
    let mut answers = Vec::new();
    while seen_calls.iter().any(|seen| !seen) || seen_responses.len() < responses.len() {
        let (body, payload) = receive_frame(&mut reader, 2 << 30).unwrap();
        let message: Value = serde_json::from_slice(&body).unwrap();
        match message["op"].as_str().unwrap() {
            "response" => {
                let id = message["id"].as_u64().unwrap() as usize;
                // A thread's frames come in the order it sent them.
                assert_eq!(id, seen_responses.len());
                assert!(matches(&payload, 1000 + id, responses[id]), "response {id}");
                seen_responses.push(id);
            }
            "bls" => {
                let call = message["call"].as_u64().unwrap() as usize;
                assert!(!seen_calls[call]);
                assert!(matches(&payload, 2000 + call, calls[call].0), "call {call}");
                seen_calls[call] = true;
                // Answered from a thread of its own, as a decoupled
                // worker's calls are.
                let writer = Arc::clone(&writer);
                let back = calls[call].1;
                answers.push(std::thread::spawn(move || {
                    let size = back;
                    send_frame(
                        &mut writer.lock().unwrap(),
                        &json!({"op": "bls_result", "call": call,
                                "outputs": [["y", "UINT8", [size], 0, size]]}),
                        &[pattern(3000 + call, size)],
                    )
                    .unwrap();
                }));
            }
            other => panic!("unexpected {other}"),
        }
    }
    for answer in answers {
        answer.join().unwrap();
    }
    canceller.join().unwrap();
    send_frame(
        &mut writer.lock().unwrap(),
        &json!({"op": "stop"}),
        &[] as &[&[u8]],
    )
    .unwrap();
    let (body, payload) = receive_frame(&mut reader, 0).unwrap();
    let summary: Value = serde_json::from_slice(&body).unwrap();
    assert!(payload.is_empty());
    assert_eq!(
        summary,
        json!({"op": "summary", "answered": calls.len(), "wrong": [], "cancels": cancels})
    );
    assert!(child.wait().unwrap().success());
}

/// A size from 0 to `max`, most small, some near `max`: log-uniform.
fn size(max: usize) -> impl Strategy<Value = usize> {
    (0u32..=max.ilog2()).prop_flat_map(|bits| 0usize..=(1usize << bits))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_frame_is_read_whole_and_in_its_place(
        calls in prop::collection::vec((size(8 << 20), size(8 << 20)), 0..6),
        responses in prop::collection::vec(size(8 << 20), 0..6),
        cancels in 0usize..20,
    ) {
        exchange(&calls, &responses, cancels);
    }
}

/// Tensors of a gigabyte, each way, beside small frames: Triton's own BLS
/// memory test sends one, then several of 50 and 200 MB.
#[test]
fn a_gigabyte_each_way_beside_small_frames() {
    exchange(&[(1 << 30, 1 << 30), (3, 0)], &[200 << 20, 0, 17], 5);
}
