//! The client against scripted servers: each test's server reads requests
//! and writes exactly the bytes given, so every framing and failure the
//! client must survive is reproduced byte for byte.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;

use wirespeed_client::{Client, ClientError, ClientOptions, InferInput, InferRequest};
use wirespeed_core::TensorData;

/// Reads one request (head and `Content-Length` body); false at the end.
fn read_request(stream: &mut TcpStream) -> bool {
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => data.push(byte[0]),
            _ => return false,
        }
    }
    let head = String::from_utf8_lossy(&data).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |n| n.trim().parse().unwrap());
    let mut body = vec![0; length];
    stream.read_exact(&mut body).is_ok()
}

/// A server that answers its connections' requests with `answers`, in
/// order: each entry is (the bytes, whether to close the connection after).
fn serve(answers: Vec<(Vec<u8>, bool)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        let mut answers = answers.into_iter();
        'connections: for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            loop {
                if !read_request(&mut stream) {
                    continue 'connections;
                }
                let Some((bytes, close)) = answers.next() else {
                    return;
                };
                stream.write_all(&bytes).unwrap();
                if close {
                    continue 'connections;
                }
            }
        }
    });
    address
}

const ANSWER: &str = r#"{"model_name":"m","model_version":"1","outputs":[{"name":"y","datatype":"INT32","shape":[2],"data":[4,5]}]}"#;

fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn request() -> InferRequest {
    InferRequest::new(vec![InferInput::binary(
        "x",
        vec![2],
        TensorData::Int32(vec![1, 2]),
    )])
}

fn outputs(client: &mut Client) -> Result<TensorData, ClientError> {
    let answer = client.infer("m", "", &request())?;
    Ok(answer.response.outputs[0].data.clone())
}

#[test]
fn a_kept_connection_closed_by_the_server_is_replaced_once() {
    // The first answer is followed by the server closing the connection
    // (an idle timeout); the second call finds it closed and reconnects.
    let address = serve(vec![(ok(ANSWER), true), (ok(ANSWER), false)]);
    let mut client = Client::new(&address, ClientOptions::default()).unwrap();
    assert_eq!(outputs(&mut client).unwrap(), TensorData::Int32(vec![4, 5]));
    assert_eq!(outputs(&mut client).unwrap(), TensorData::Int32(vec![4, 5]));
}

#[test]
fn chunked_and_close_delimited_bodies() {
    let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for part in ANSWER.as_bytes().chunks(7) {
        chunked.extend(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend(part);
        chunked.extend(b"\r\n");
    }
    chunked.extend(b"0\r\nX-Trailer: 1\r\n\r\n");
    let until_close = format!("HTTP/1.0 200 OK\r\n\r\n{ANSWER}").into_bytes();
    let address = serve(vec![(chunked, false), (until_close, true)]);
    let mut client = Client::new(&address, ClientOptions::default()).unwrap();
    assert_eq!(outputs(&mut client).unwrap(), TensorData::Int32(vec![4, 5]));
    assert_eq!(outputs(&mut client).unwrap(), TensorData::Int32(vec![4, 5]));
}

#[test]
fn the_servers_error_is_the_error() {
    let body = r#"{"error":"unknown model 'm'"}"#;
    let answer = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let address = serve(vec![(answer.into_bytes(), false), (ok(ANSWER), false)]);
    let mut client = Client::new(&address, ClientOptions::default()).unwrap();
    let err = outputs(&mut client).unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.to_string(), "unknown model 'm'");
    // The connection is still good.
    assert_eq!(outputs(&mut client).unwrap(), TensorData::Int32(vec![4, 5]));
}

#[test]
fn broken_answers_are_clear_errors_not_hangs() {
    let cut = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{}",
        ANSWER.len(),
        &ANSWER[..20]
    );
    let not_v2 = ok(r#"{"outputs": 3}"#);
    let binary_short = format!(
        "HTTP/1.1 200 OK\r\nInference-Header-Content-Length: 80\r\nContent-Length: 85\r\n\r\n{:<80}abcde",
        r#"{"outputs":[{"name":"y","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]}"#
            .get(..80)
            .unwrap_or_default()
    );
    let garbage = b"SSH-2.0-OpenSSH\r\n\r\n".to_vec();
    let address = serve(vec![
        (cut.into_bytes(), true),
        (not_v2, false),
        (binary_short.into_bytes(), true),
        (garbage, true),
    ]);
    let mut client = Client::new(&address, ClientOptions::default()).unwrap();
    let err = outputs(&mut client).unwrap_err();
    assert!(err.to_string().contains("closed the connection"), "{err}");
    let err = outputs(&mut client).unwrap_err();
    assert!(
        err.to_string().contains("'outputs' must be an array"),
        "{err}"
    );
    let err = outputs(&mut client).unwrap_err();
    assert!(matches!(err, ClientError::Protocol(_)), "{err}");
    let err = outputs(&mut client).unwrap_err();
    assert!(err.to_string().contains("not HTTP/1.1"), "{err}");
}

#[test]
fn a_body_over_the_limit_is_refused_before_it_is_read() {
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n".to_vec();
    let address = serve(vec![(answer, true)]);
    let options = ClientOptions {
        max_body: 1 << 20,
        ..ClientOptions::default()
    };
    let mut client = Client::new(&address, options).unwrap();
    let err = outputs(&mut client).unwrap_err();
    assert!(err.to_string().contains("over the client's limit"), "{err}");
}

#[test]
fn binary_sizes_the_body_cannot_hold_are_refused_before_allocating() {
    let json = r#"{"outputs":[{"name":"y","datatype":"FP32","shape":[1000000000],"parameters":{"binary_data_size":4000000000}}]}"#;
    let answer = format!(
        "HTTP/1.1 200 OK\r\nInference-Header-Content-Length: {}\r\nContent-Length: {}\r\n\r\n{json}abcd",
        json.len(),
        json.len() + 4
    );
    let address = serve(vec![(answer.into_bytes(), true)]);
    let mut client = Client::new(&address, ClientOptions::default()).unwrap();
    let err = outputs(&mut client).unwrap_err();
    assert!(
        err.to_string()
            .contains("declare 4000000000 bytes, but 4 follow"),
        "{err}"
    );
}
