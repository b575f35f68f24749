//! HTTP/1.1 on one connection: a request written in one go, the answer's
//! head parsed with httparse, its body handed on chunk by chunk as it is
//! read (`Content-Length`, chunked, or to the end of the connection).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::{ClientError, Target};

/// Bytes read from the socket at a time, and the most a response head may take.
const BUFFER: usize = 64 << 10;
/// Headers parsed in a response head.
const MAX_HEADERS: usize = 64;

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The parts of a response head the client acts on.
#[derive(Debug, Clone, Default)]
pub(crate) struct Head {
    pub(crate) status: u16,
    pub(crate) content_length: Option<u64>,
    pub(crate) chunked: bool,
    /// The server closes the connection after this answer.
    pub(crate) close: bool,
    /// `Inference-Header-Content-Length`: the JSON's length in a binary answer.
    pub(crate) header_length: Option<u64>,
    pub(crate) content_encoding: Option<String>,
}

/// One open connection, with what was read past the last answer.
pub(crate) struct Connection {
    stream: Stream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Answers read on it so far: a failure before the first byte of an
    /// answer on a used connection may be the server closing it while idle.
    pub(crate) answers: u64,
}

impl Connection {
    pub(crate) fn open(
        target: &Target,
        connect_timeout: Duration,
        network_timeout: Duration,
    ) -> Result<Connection, ClientError> {
        let connect = |source| ClientError::Connect {
            target: target.to_string(),
            source,
        };
        let stream = match target {
            Target::Tcp { host, port, .. } => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                let mut opened = None;
                for addr in (host.as_str(), *port).to_socket_addrs().map_err(connect)? {
                    match TcpStream::connect_timeout(&addr, connect_timeout) {
                        Ok(s) => {
                            opened = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let stream = opened.ok_or_else(|| connect(last))?;
                stream.set_nodelay(true).map_err(connect)?;
                stream
                    .set_read_timeout(Some(network_timeout))
                    .map_err(connect)?;
                stream
                    .set_write_timeout(Some(network_timeout))
                    .map_err(connect)?;
                Stream::Tcp(stream)
            }
            Target::Unix(path) => {
                let stream = UnixStream::connect(path).map_err(connect)?;
                stream
                    .set_read_timeout(Some(network_timeout))
                    .map_err(connect)?;
                stream
                    .set_write_timeout(Some(network_timeout))
                    .map_err(connect)?;
                Stream::Unix(stream)
            }
        };
        Ok(Connection {
            stream,
            buf: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            answers: 0,
        })
    }

    /// Writes `parts` as one request.
    pub(crate) fn send(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        for part in parts {
            self.stream.write_all(part)?;
        }
        Ok(())
    }

    /// Reads more bytes after the buffered ones; 0 at the end of the stream.
    fn fill(&mut self) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a response head longer than {BUFFER} bytes"),
            ));
        }
        let n = self.stream.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// Reads the next response head (skipping `100 Continue`s).
    pub(crate) fn read_head(&mut self) -> Result<Head, HeadError> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut headers);
            let parsed = response
                .parse(&self.buf[self.start..self.end])
                .map_err(|e| HeadError::Protocol(format!("the answer is not HTTP/1.1: {e}")))?;
            let httparse::Status::Complete(len) = parsed else {
                let first = self.start == self.end;
                match self.fill() {
                    Ok(0) if first => return Err(HeadError::Closed(None)),
                    Ok(0) => {
                        return Err(HeadError::Protocol(
                            "the server closed the connection inside a response head".into(),
                        ))
                    }
                    Ok(_) => continue,
                    Err(e) if first => return Err(HeadError::Closed(Some(e))),
                    Err(e) => return Err(HeadError::Io(e)),
                }
            };
            let status = response.code.unwrap_or(0);
            let mut head = Head {
                status,
                close: response.version == Some(0),
                ..Head::default()
            };
            for h in response.headers.iter() {
                let value = std::str::from_utf8(h.value).unwrap_or("").trim();
                let number = || {
                    value.parse::<u64>().map_err(|_| {
                        HeadError::Protocol(format!("the answer's {} is {value:?}", h.name))
                    })
                };
                if h.name.eq_ignore_ascii_case("content-length") {
                    head.content_length = Some(number()?);
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    head.chunked = value.to_ascii_lowercase().ends_with("chunked");
                } else if h.name.eq_ignore_ascii_case("connection") {
                    let value = value.to_ascii_lowercase();
                    if value.contains("close") {
                        head.close = true;
                    } else if value.contains("keep-alive") {
                        head.close = false;
                    }
                } else if h
                    .name
                    .eq_ignore_ascii_case("inference-header-content-length")
                {
                    head.header_length = Some(number()?);
                } else if h.name.eq_ignore_ascii_case("content-encoding") {
                    head.content_encoding = Some(value.to_ascii_lowercase());
                }
            }
            self.start += len;
            if (100..200).contains(&status) {
                continue;
            }
            return Ok(head);
        }
    }

    /// Hands the body of the answer `head` to `on_chunk`, chunk by chunk.
    /// More than `limit` bytes of body is an error.
    pub(crate) fn read_body(
        &mut self,
        head: &Head,
        limit: u64,
        mut on_chunk: impl FnMut(&[u8]) -> Result<(), ClientError>,
    ) -> Result<(), BodyError> {
        self.answers += 1;
        let over = |n: u64| {
            BodyError::Protocol(format!(
                "the answer's body is {n} bytes or more, over the client's limit of {limit} bytes"
            ))
        };
        if head.chunked {
            return self.read_chunked(limit, on_chunk);
        }
        match head.content_length {
            Some(len) if len > limit => Err(over(len)),
            Some(mut left) => {
                while left > 0 {
                    if self.start == self.end && self.fill().map_err(BodyError::Io)? == 0 {
                        return Err(BodyError::Protocol(format!(
                            "the server closed the connection {left} bytes before the body's end"
                        )));
                    }
                    let n =
                        (self.end - self.start).min(usize::try_from(left).unwrap_or(usize::MAX));
                    on_chunk(&self.buf[self.start..self.start + n]).map_err(BodyError::Sink)?;
                    self.start += n;
                    left -= n as u64;
                }
                Ok(())
            }
            None => {
                // No length: the body runs to the end of the connection.
                let mut total = 0u64;
                loop {
                    if self.start == self.end && self.fill().map_err(BodyError::Io)? == 0 {
                        return Ok(());
                    }
                    total += (self.end - self.start) as u64;
                    if total > limit {
                        return Err(over(total));
                    }
                    on_chunk(&self.buf[self.start..self.end]).map_err(BodyError::Sink)?;
                    self.start = self.end;
                }
            }
        }
    }

    fn read_chunked(
        &mut self,
        limit: u64,
        mut on_chunk: impl FnMut(&[u8]) -> Result<(), ClientError>,
    ) -> Result<(), BodyError> {
        let mut total = 0u64;
        loop {
            let size = loop {
                match httparse::parse_chunk_size(&self.buf[self.start..self.end]) {
                    Ok(httparse::Status::Complete((len, size))) => {
                        self.start += len;
                        break size;
                    }
                    Ok(httparse::Status::Partial) => self.more()?,
                    Err(_) => {
                        return Err(BodyError::Protocol(
                            "the answer's chunked body has a malformed chunk size".into(),
                        ))
                    }
                }
            };
            if size == 0 {
                // Trailers, if any, up to the empty line.
                loop {
                    let line_end = self.buf[self.start..self.end]
                        .windows(2)
                        .position(|w| w == b"\r\n");
                    match line_end {
                        Some(0) => {
                            self.start += 2;
                            return Ok(());
                        }
                        Some(n) => self.start += n + 2,
                        None => self.more()?,
                    }
                }
            }
            total = total.saturating_add(size);
            if total > limit {
                return Err(BodyError::Protocol(format!(
                    "the answer's body is over the client's limit of {limit} bytes"
                )));
            }
            let mut left = size;
            while left > 0 {
                if self.start == self.end {
                    self.more()?;
                }
                let n = (self.end - self.start).min(usize::try_from(left).unwrap_or(usize::MAX));
                on_chunk(&self.buf[self.start..self.start + n]).map_err(BodyError::Sink)?;
                self.start += n;
                left -= n as u64;
            }
            while self.end - self.start < 2 {
                self.more()?;
            }
            if &self.buf[self.start..self.start + 2] != b"\r\n" {
                return Err(BodyError::Protocol(
                    "a chunk of the answer's body does not end with CRLF".into(),
                ));
            }
            self.start += 2;
        }
    }

    /// Reads more, where the end of the stream is an error.
    fn more(&mut self) -> Result<(), BodyError> {
        match self.fill() {
            Ok(0) => Err(BodyError::Protocol(
                "the server closed the connection inside a chunked body".into(),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(BodyError::Io(e)),
        }
    }
}

/// Why no head was read.
pub(crate) enum HeadError {
    /// The connection ended (or failed) before the answer's first byte.
    Closed(Option<io::Error>),
    Io(io::Error),
    Protocol(String),
}

/// Why a body was not read whole.
pub(crate) enum BodyError {
    Io(io::Error),
    Protocol(String),
    /// The consumer of the body refused it.
    Sink(ClientError),
}
