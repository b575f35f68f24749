//! A keep-alive HTTP/1.1 client connection that times each exchange in
//! three parts: writing the request, waiting for the first byte of the
//! answer, and reading the rest.
//!
//! hyper's client resolves a request when the response head has arrived and
//! says nothing of when the body finished going out, so it cannot give that
//! split, nor pace a body's bytes over time (the streaming-body scenario).
//! This writes prepared bytes itself and parses the response with httparse.

use std::io;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::stats::{Phases, ServerTiming, STAGES};
use crate::target::Transport;
use crate::timer::PreciseTimer;
use crate::workload::HttpRequest;

/// A stream to the server.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub(crate) async fn connect(transport: &Transport) -> io::Result<Stream> {
        Ok(match transport {
            Transport::Tcp(address) => {
                let stream = TcpStream::connect(address).await?;
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            Transport::Unix(path) => Stream::Unix(UnixStream::connect(path).await?),
        })
    }

    async fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes).await,
            Stream::Unix(s) => s.write_all(bytes).await,
        }
    }

    async fn read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read_buf(buf).await,
            Stream::Unix(s) => s.read_buf(buf).await,
        }
    }
}

/// An answer, timed.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) phases: Phases,
    pub(crate) server: Option<ServerTiming>,
    pub(crate) bytes_in: u64,
    /// The server will close the connection after this answer.
    pub(crate) close: bool,
    /// The start of the body, for error messages.
    pub(crate) body_start: String,
}

/// How a body's bytes are spread over time.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Bytes per second.
    pub bytes_per_second: f64,
}

/// A keep-alive connection.
pub(crate) struct Connection {
    stream: Stream,
    buf: BytesMut,
}

/// Pieces of a paced body: small enough to pace smoothly, large enough not
/// to cost a wake-up per few bytes.
const PACE_PIECE: usize = 64 * 1024;

impl Connection {
    pub(crate) async fn open(transport: &Transport) -> io::Result<Connection> {
        Ok(Connection {
            stream: Stream::connect(transport).await?,
            buf: BytesMut::with_capacity(64 * 1024),
        })
    }

    /// Writes `request` (its body at `pace`, when given) and reads the answer.
    pub(crate) async fn exchange(
        &mut self,
        request: &HttpRequest,
        pace: Option<(Pace, &PreciseTimer)>,
    ) -> io::Result<Answer> {
        let start = Instant::now();
        let written = self.write(request, pace, start).await;
        let sent = Instant::now();
        if let Err(e) = written {
            // A server that refuses a body early (413) answers and closes;
            // the answer says more than the broken pipe.
            return match self.read_answer(start, sent).await {
                Ok(answer) => Ok(answer),
                Err(_) => Err(e),
            };
        }
        self.read_answer(start, sent).await
    }

    async fn write(
        &mut self,
        request: &HttpRequest,
        pace: Option<(Pace, &PreciseTimer)>,
        start: Instant,
    ) -> io::Result<()> {
        self.stream.write_all(&request.head).await?;
        let Some((pace, timer)) = pace else {
            for piece in &request.body {
                self.stream.write_all(piece).await?;
            }
            return Ok(());
        };
        // Each piece goes out when the bytes before it are due, so the last
        // byte leaves on time and nothing is waited for after it.
        let mut done = 0usize;
        for piece in &request.body {
            for part in piece.chunks(PACE_PIECE) {
                let due = start + Duration::from_secs_f64(done as f64 / pace.bytes_per_second);
                timer.sleep_until(due).await;
                self.stream.write_all(part).await?;
                done += part.len();
            }
        }
        Ok(())
    }

    async fn fill(&mut self) -> io::Result<()> {
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        Ok(())
    }

    async fn read_answer(&mut self, start: Instant, sent: Instant) -> io::Result<Answer> {
        let mut first_byte = None;
        loop {
            if !self.buf.is_empty() {
                first_byte.get_or_insert_with(Instant::now);
                let mut headers = [httparse::EMPTY_HEADER; 64];
                let mut response = httparse::Response::new(&mut headers);
                let parsed = response.parse(&self.buf).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("bad response head: {e}"),
                    )
                })?;
                if let httparse::Status::Complete(head_len) = parsed {
                    let status = response.code.unwrap_or(0);
                    let mut length = None;
                    let mut chunked = false;
                    let mut close = false;
                    let mut server = None;
                    for h in response.headers.iter() {
                        let value = std::str::from_utf8(h.value).unwrap_or("");
                        if h.name.eq_ignore_ascii_case("content-length") {
                            length = value.trim().parse::<usize>().ok();
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            chunked = value.to_ascii_lowercase().contains("chunked");
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            close = value.eq_ignore_ascii_case("close");
                        } else if h.name.eq_ignore_ascii_case("server-timing") {
                            server = parse_server_timing(value);
                        }
                    }
                    self.buf.advance(head_len);
                    let mut body_start = Vec::new();
                    let body_len = if chunked {
                        self.read_chunked(&mut body_start).await?
                    } else {
                        let length = length.unwrap_or(0);
                        self.skip(length, &mut body_start).await?;
                        length
                    };
                    let first = first_byte.expect("set above");
                    let done = Instant::now();
                    return Ok(Answer {
                        status,
                        phases: Phases {
                            send: sent - start,
                            wait: first.saturating_duration_since(sent),
                            receive: done - first.max(sent),
                        },
                        server,
                        bytes_in: (head_len + body_len) as u64,
                        close,
                        body_start: String::from_utf8_lossy(&body_start).into_owned(),
                    });
                }
                if self.buf.len() > MAX_HEAD_BYTES {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the response head is over {MAX_HEAD_BYTES} bytes"),
                    ));
                }
            }
            self.fill().await?;
        }
    }

    /// Reads and drops `n` body bytes as they arrive, keeping the first
    /// [`KEPT_BYTES`] in `kept` (for error messages): an answer of any size
    /// costs no more memory than the read buffer.
    async fn skip(&mut self, mut n: usize, kept: &mut Vec<u8>) -> io::Result<()> {
        loop {
            let take = n.min(self.buf.len());
            let keep = take.min(KEPT_BYTES.saturating_sub(kept.len()));
            kept.extend_from_slice(&self.buf[..keep]);
            self.buf.advance(take);
            n -= take;
            if n == 0 {
                return Ok(());
            }
            self.fill().await?;
        }
    }

    /// Reads a chunked body, keeping its start in `kept`; returns its length.
    async fn read_chunked(&mut self, kept: &mut Vec<u8>) -> io::Result<usize> {
        let mut total = 0usize;
        loop {
            let line = loop {
                if let Some(end) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break end;
                }
                if self.buf.len() > MAX_HEAD_BYTES {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a chunk-size line is too long",
                    ));
                }
                self.fill().await?;
            };
            let size_text = std::str::from_utf8(&self.buf[..line]).unwrap_or("");
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            self.buf.advance(line + 2);
            // The chunk and its CRLF; a chunked body ends with an empty
            // chunk (wirespeed sends no trailers).
            self.skip(size, kept).await?;
            let mut crlf = Vec::new();
            self.skip(2, &mut crlf).await?;
            total = total.saturating_add(size);
            if size == 0 {
                return Ok(total);
            }
        }
    }
}

/// The most bytes of a response head (and of a chunk-size line).
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// How much of an answer's body is kept, for error messages.
const KEPT_BYTES: usize = 200;

/// The stages of a `Server-Timing` value (`decode;dur=0.301, ...`), in the
/// order of [`STAGES`]; `None` unless it names at least one of them.
pub(crate) fn parse_server_timing(value: &str) -> Option<ServerTiming> {
    let mut timing = ServerTiming::default();
    let mut any = false;
    for metric in value.split(',') {
        let mut parts = metric.trim().split(';');
        let name = parts.next().unwrap_or("").trim();
        if name == "batch" {
            for param in parts {
                if let Some(rows) = param.trim().strip_prefix("desc=") {
                    if let Ok(rows) = rows.trim().trim_matches('"').parse::<u64>() {
                        timing.batch = Some(rows);
                        any = true;
                    }
                }
            }
            continue;
        }
        let Some(index) = STAGES.iter().position(|s| *s == name) else {
            continue;
        };
        for param in parts {
            if let Some(ms) = param.trim().strip_prefix("dur=") {
                if let Ok(ms) = ms.trim().parse::<f64>() {
                    if ms.is_finite() && ms >= 0.0 {
                        timing.stages[index] = Duration::from_secs_f64(ms / 1e3);
                        any = true;
                    }
                }
            }
        }
    }
    any.then_some(timing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_values_parse() {
        let t = parse_server_timing("read;dur=0.412, decode;dur=0.301,queue;dur=0.001, compute;desc=\"x\";dur=4, encode;dur=0.010, total;dur=5, other;dur=9").unwrap();
        let s = t.stages;
        assert_eq!(s[1], Duration::from_micros(301));
        assert_eq!(s[3], Duration::from_millis(4));
        assert_eq!(s[5], Duration::from_millis(5));
        assert_eq!(t.batch, None);
        let t = parse_server_timing("queue;dur=1.5, batch;desc=12, compute;dur=2").unwrap();
        assert_eq!(t.batch, Some(12));
        assert_eq!(t.stages[2], Duration::from_micros(1500));
        assert_eq!(
            parse_server_timing("batch;desc=\"7\"").unwrap().batch,
            Some(7)
        );
        assert!(parse_server_timing("batch;desc=many").is_none());
        assert!(parse_server_timing("cache;dur=1").is_none());
        assert!(parse_server_timing("decode;dur=-1, total;dur=abc").is_none());
    }
}
