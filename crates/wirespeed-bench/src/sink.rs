//! The `sink:` target: an HTTP/1.1 responder inside the bench process that
//! reads each request whole and answers `{}` at once, doing nothing else.
//! Measuring it shows what the client alone can push with a given workload,
//! so a user can check that the load generator is not the bottleneck of a
//! measurement: the sink's throughput must be well above the server's.
//!
//! It runs on its own thread with a single-threaded runtime, as a server
//! would on its own core.

use std::io;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ANSWER: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/// Starts a sink on a free loopback port; it lives as long as the process.
pub fn start() -> io::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let address = listener.local_addr()?;
    std::thread::Builder::new()
        .name("bench-sink".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the sink's runtime starts");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                while let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let _ = answer(socket).await;
                    });
                }
            });
        })?;
    Ok(address)
}

/// The most bytes of a request head, or of a chunk-size line.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Reads requests (a head, then a `Content-Length` or chunked body) and
/// answers each. Bodies are dropped as they arrive, so a request of any
/// size costs the read buffer; a head or chunk-size line past
/// [`MAX_HEAD_BYTES`] closes the connection.
async fn answer(mut socket: TcpStream) -> io::Result<()> {
    socket.set_nodelay(true)?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    loop {
        let (head, length, chunked) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(head)) = request.parse(&buf) {
                let value = |name: &str| {
                    request
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .and_then(|h| std::str::from_utf8(h.value).ok())
                };
                let length = value("content-length")
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                let chunked = value("transfer-encoding").is_some_and(|v| v.contains("chunked"));
                break (head, length, chunked);
            }
            if buf.len() > MAX_HEAD_BYTES || !fill(&mut socket, &mut buf).await? {
                return Ok(());
            }
        };
        buf.advance(head);
        if !chunked {
            if !skip(&mut socket, &mut buf, length).await? {
                return Ok(());
            }
        } else {
            // Skip chunks until the last (empty) one.
            loop {
                let Some(line) = buf.windows(2).position(|w| w == b"\r\n") else {
                    if buf.len() > MAX_HEAD_BYTES || !fill(&mut socket, &mut buf).await? {
                        return Ok(());
                    }
                    continue;
                };
                let size = std::str::from_utf8(&buf[..line])
                    .ok()
                    .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad chunk"))?;
                buf.advance(line + 2);
                if !skip(&mut socket, &mut buf, size.saturating_add(2)).await? {
                    return Ok(());
                }
                if size == 0 {
                    break;
                }
            }
        }
        socket.write_all(ANSWER).await?;
    }
}

/// Reads more; `false` when the client has gone.
async fn fill(socket: &mut TcpStream, buf: &mut BytesMut) -> io::Result<bool> {
    Ok(socket.read_buf(buf).await? > 0)
}

/// Drops the next `n` bytes as they arrive; `false` when the client has gone.
async fn skip(socket: &mut TcpStream, buf: &mut BytesMut, mut n: usize) -> io::Result<bool> {
    loop {
        let take = n.min(buf.len());
        buf.advance(take);
        n -= take;
        if n == 0 {
            return Ok(true);
        }
        if !fill(socket, buf).await? {
            return Ok(false);
        }
    }
}
