//! The protocol's calls on one kept-open connection.

use std::time::Duration;

use crate::answer::{Answer, AnswerReader};
use crate::connection::{BodyError, Connection, Head, HeadError};
use crate::{ClientError, InferRequest, Target};

/// How a client connects and how much it accepts.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// How long to wait for a connection.
    pub connect_timeout: Duration,
    /// How long one read or write may block.
    pub network_timeout: Duration,
    /// The largest answer body accepted.
    pub max_body: u64,
    /// Headers sent with every request.
    pub headers: Vec<(String, String)>,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            connect_timeout: Duration::from_secs(60),
            network_timeout: Duration::from_secs(60),
            max_body: 4 << 30,
            headers: Vec::new(),
        }
    }
}

/// An answer other than an infer answer: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

/// A client of one server, on one connection kept open between calls.
/// Calls take `&mut self`: share a client between threads behind a lock,
/// or give each thread its own.
pub struct Client {
    target: Target,
    host: String,
    options: ClientOptions,
    connection: Option<Connection>,
}

/// A request's method, path and extra headers.
struct Call<'a> {
    method: &'a str,
    path: &'a str,
    headers: &'a [(String, String)],
}

impl Client {
    /// A client of the server at `url` (see [`Target::parse`]); it
    /// connects on its first call.
    pub fn new(url: &str, options: ClientOptions) -> Result<Client, ClientError> {
        let target = Target::parse(url)?;
        Ok(Client {
            host: target.host_header(),
            target,
            options,
            connection: None,
        })
    }

    /// Where the server is.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Closes the connection; the next call opens a new one.
    pub fn close(&mut self) {
        self.connection = None;
    }

    /// `GET /v2/health/live` answers 200.
    pub fn is_server_live(&mut self, headers: &[(String, String)]) -> Result<bool, ClientError> {
        Ok(self.get("/v2/health/live", headers)?.status == 200)
    }

    /// `GET /v2/health/ready` answers 200.
    pub fn is_server_ready(&mut self, headers: &[(String, String)]) -> Result<bool, ClientError> {
        Ok(self.get("/v2/health/ready", headers)?.status == 200)
    }

    /// The model (at `version`, or the server's choice when empty) answers
    /// ready.
    pub fn is_model_ready(
        &mut self,
        model: &str,
        version: &str,
        headers: &[(String, String)],
    ) -> Result<bool, ClientError> {
        let path = model_path(model, version, "/ready");
        Ok(self.get(&path, headers)?.status == 200)
    }

    /// `GET /v2`: the server's metadata, as JSON.
    pub fn server_metadata(
        &mut self,
        headers: &[(String, String)],
    ) -> Result<Vec<u8>, ClientError> {
        ok(self.get("/v2", headers)?)
    }

    /// The model's metadata, as JSON.
    pub fn model_metadata(
        &mut self,
        model: &str,
        version: &str,
        headers: &[(String, String)],
    ) -> Result<Vec<u8>, ClientError> {
        let path = model_path(model, version, "");
        ok(self.get(&path, headers)?)
    }

    /// The model's configuration (Triton's model configuration extension), as JSON.
    pub fn model_config(
        &mut self,
        model: &str,
        version: &str,
        headers: &[(String, String)],
    ) -> Result<Vec<u8>, ClientError> {
        let path = model_path(model, version, "/config");
        ok(self.get(&path, headers)?)
    }

    /// Any `GET` under the server's API, answered with its status and body.
    pub fn get(&mut self, path: &str, headers: &[(String, String)]) -> Result<Reply, ClientError> {
        let call = Call {
            method: "GET",
            path,
            headers,
        };
        self.exchange(&call, None, &[], read_reply_default)
    }

    /// Any `POST` of a JSON body under the server's API.
    pub fn post(
        &mut self,
        path: &str,
        body: &[u8],
        headers: &[(String, String)],
    ) -> Result<Reply, ClientError> {
        let call = Call {
            method: "POST",
            path,
            headers,
        };
        self.exchange(&call, None, &[body], read_reply_default)
    }

    /// Runs `request` on the model (at `version`, or the server's choice
    /// when empty).
    pub fn infer(
        &mut self,
        model: &str,
        version: &str,
        request: &InferRequest,
    ) -> Result<Answer, ClientError> {
        self.infer_with_headers(model, version, request, &[])
    }

    /// [`infer`](Self::infer) with extra headers.
    pub fn infer_with_headers(
        &mut self,
        model: &str,
        version: &str,
        request: &InferRequest,
        headers: &[(String, String)],
    ) -> Result<Answer, ClientError> {
        let mut header = Vec::with_capacity(256);
        let binary = request.write_header(&mut header);
        let path = model_path(model, version, "/infer");
        let call = Call {
            method: "POST",
            path: &path,
            headers,
        };
        let mut parts: Vec<&[u8]> = vec![&header];
        parts.extend(request.raw_parts());
        let header_len = binary.then_some(header.len());
        let max = self.options.max_body;
        self.exchange(&call, header_len, &parts, |connection, head| {
            if head.status != 200 {
                return Err(server_error(read_reply(connection, head, max)?));
            }
            refuse_encoding(head)?;
            let mut reader = AnswerReader::new(head.content_length, head.header_length, max);
            connection
                .read_body(head, max, |chunk| reader.feed(chunk))
                .map_err(|e| body_error(e, "infer answer"))?;
            reader.finish()
        })
    }

    /// Sends one request and reads its answer with `read`, on the kept
    /// connection or a new one. A kept connection the server closed while
    /// idle is replaced and the request sent again, once, when nothing of
    /// an answer was read.
    fn exchange<T>(
        &mut self,
        call: &Call<'_>,
        header_len: Option<usize>,
        body: &[&[u8]],
        read: impl Fn(&mut Connection, &Head) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let length: usize = body.iter().map(|p| p.len()).sum();
        let mut head = Vec::with_capacity(256);
        head.extend_from_slice(call.method.as_bytes());
        head.push(b' ');
        head.extend_from_slice(self.target.prefix().as_bytes());
        head.extend_from_slice(call.path.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        head.extend_from_slice(self.host.as_bytes());
        head.extend_from_slice(b"\r\n");
        if call.method == "POST" {
            // A JSON body says so; a binary one must not, or servers that
            // parse JSON bodies by their type (KServe's FastAPI) refuse it.
            head.extend_from_slice(match header_len {
                Some(_) => b"Content-Type: application/octet-stream\r\n",
                None => b"Content-Type: application/json\r\n",
            });
            head.extend_from_slice(b"Content-Length: ");
            head.extend_from_slice(itoa::Buffer::new().format(length).as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        if let Some(len) = header_len {
            head.extend_from_slice(b"Inference-Header-Content-Length: ");
            head.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        for (name, value) in self.options.headers.iter().chain(call.headers) {
            if name.contains(['\r', '\n', ':']) || value.contains(['\r', '\n']) {
                return Err(ClientError::Request(format!(
                    "header {name:?} cannot be sent: names and values may not hold line breaks"
                )));
            }
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        // A small request goes out in one write (one packet with TCP_NODELAY).
        let joined;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(body.len() + 1);
        if length <= 16 << 10 {
            let mut all = head;
            for part in body {
                all.extend_from_slice(part);
            }
            joined = all;
            parts.push(&joined);
        } else {
            joined = head;
            parts.push(&joined);
            parts.extend_from_slice(body);
        }

        for attempt in 0..2 {
            let mut connection = match self.connection.take() {
                Some(c) => c,
                None => Connection::open(
                    &self.target,
                    self.options.connect_timeout,
                    self.options.network_timeout,
                )?,
            };
            let reused = connection.answers > 0;
            let retry = reused && attempt == 0;
            if let Err(e) = connection.send(&parts) {
                if retry {
                    continue;
                }
                return Err(self.io(e));
            }
            let head = match connection.read_head() {
                Ok(head) => head,
                Err(HeadError::Closed(_)) if retry => continue,
                Err(HeadError::Closed(None)) => {
                    return Err(ClientError::Protocol(format!(
                        "{} closed the connection without answering",
                        self.target
                    )))
                }
                Err(HeadError::Closed(Some(e)) | HeadError::Io(e)) => return Err(self.io(e)),
                Err(HeadError::Protocol(m)) => return Err(ClientError::Protocol(m)),
            };
            let value = read(&mut connection, &head);
            if value.is_ok() && !head.close {
                self.connection = Some(connection);
            }
            return value;
        }
        unreachable!("the second attempt returns")
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io {
            target: self.target.to_string(),
            source,
        }
    }
}

/// `/v2/models/{model}[/versions/{version}]{tail}`, the names escaped.
fn model_path(model: &str, version: &str, tail: &str) -> String {
    let mut path = String::from("/v2/models/");
    escape(model, &mut path);
    if !version.is_empty() {
        path.push_str("/versions/");
        escape(version, &mut path);
    }
    path.push_str(tail);
    path
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn escape(segment: &str, out: &mut String) {
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn read_reply(connection: &mut Connection, head: &Head, max: u64) -> Result<Reply, ClientError> {
    let mut body = Vec::new();
    connection
        .read_body(head, max, |chunk| {
            body.extend_from_slice(chunk);
            Ok(())
        })
        .map_err(|e| body_error(e, "answer"))?;
    Ok(Reply {
        status: head.status,
        body,
    })
}

fn read_reply_default(connection: &mut Connection, head: &Head) -> Result<Reply, ClientError> {
    read_reply(connection, head, 64 << 20)
}

/// The reply's body when it is a success, else the server's error.
fn ok(reply: Reply) -> Result<Vec<u8>, ClientError> {
    if reply.status == 200 {
        Ok(reply.body)
    } else {
        Err(server_error(reply))
    }
}

/// The server's `{"error": ...}` message, or its body as text.
fn server_error(reply: Reply) -> ClientError {
    let message = serde_json::from_slice::<serde_json::Value>(&reply.body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&reply.body).trim().to_owned());
    ClientError::Server {
        status: reply.status,
        message,
    }
}

fn refuse_encoding(head: &Head) -> Result<(), ClientError> {
    match head.content_encoding.as_deref() {
        None | Some("identity") => Ok(()),
        Some(other) => Err(ClientError::Protocol(format!(
            "the answer is {other}-encoded, which this client did not ask for"
        ))),
    }
}

fn body_error(e: BodyError, what: &str) -> ClientError {
    match e {
        BodyError::Io(e) => ClientError::Protocol(format!("reading the {what}: {e}")),
        BodyError::Protocol(m) => ClientError::Protocol(m),
        BodyError::Sink(e) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_escape_names() {
        assert_eq!(
            model_path("a b/c", "", "/infer"),
            "/v2/models/a%20b%2Fc/infer"
        );
        assert_eq!(
            model_path("m", "2", "/ready"),
            "/v2/models/m/versions/2/ready"
        );
    }
}
