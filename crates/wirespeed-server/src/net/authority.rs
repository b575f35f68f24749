//! gRPC over a Unix socket with any client: the `:authority` that many
//! clients send there is made one the `h2` crate accepts.
//!
//! grpcio since 1.57 sends the socket path, percent-encoded, as the HTTP/2
//! `:authority` (`tmp%2Fgrpc.sock`); grpc-java and Bazel send it raw
//! (`/tmp/grpc.sock`). Neither is a valid URI authority, and `h2` (under
//! hyper and tonic) resets such a stream with PROTOCOL_ERROR
//! (hyperium/h2#487, open since 2020; grpc/grpc#38142). Triton's server
//! accepts these clients, so wirespeed must.
//!
//! The choices were a maintained `h2` option (there is none), a `[patch]`
//! of `h2` (a fork of the whole crate to carry, and `h2` cannot tell a Unix
//! socket from TCP, where a malformed authority must stay an error), or
//! this: on gRPC Unix-socket connections only, the bytes the client sends
//! pass through [`AuthorityFix`] before hyper reads them. It follows the
//! HTTP/2 frames as they are read into hyper's buffer: DATA and every
//! frame but header blocks stay there untouched; each header block (HEADERS and
//! its CONTINUATIONs) is decoded with the client's HPACK context,
//! `:authority` is replaced by `localhost` when it is not a valid
//! authority (a Unix socket has no other host), and the block is written
//! again with every field a literal without indexing, so `h2`'s dynamic
//! table stays empty and there is no second context to keep in step.
//! HPACK is stateful, so every block on the connection is rewritten, not
//! only those that change. TCP listeners never see this, so `h2` keeps
//! refusing malformed authorities there. A connection that does not start
//! with the HTTP/2 preface (TLS) passes through untouched.
//!
//! Decoding is `hpack.rs` (why it is written here is said there); with
//! it, the fix costs a Titanic gRPC request over the socket 2 to 4 µs of
//! CPU (`docs/performance.md`). Writing literals needs only HPACK's
//! integer and string forms, a few lines here.
//!
//! Drop this when `h2` accepts such authorities on its own.

use std::borrow::Cow;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};

use crate::net::hpack;
use crate::net::listen::Listener;

/// The client's connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Re-encoded header blocks are cut into frames no larger than HTTP/2's
/// minimum maximum frame size, which every peer accepts.
const FRAME_BYTES: usize = 16 * 1024;

/// Bytes read at a time while a frame's header or header block is
/// gathered.
const READ_BYTES: usize = 16 * 1024;

/// The dynamic table the client may use: `h2`'s
/// SETTINGS_HEADER_TABLE_SIZE, HTTP/2's default.
const DYNAMIC_TABLE_BYTES: usize = 4096;

/// The largest header block gathered before giving up on it: hyper's own
/// header-list limit refuses far smaller ones.
const MAX_BLOCK_BYTES: usize = 1 << 20;

/// A gRPC Unix-socket listener whose connections pass through
/// [`AuthorityFix`].
pub(crate) struct GrpcUnixListener(pub(crate) UnixListener);

impl Listener for GrpcUnixListener {
    type Io = AuthorityFix<UnixStream>;

    async fn accept(&self) -> io::Result<(Self::Io, String)> {
        let (stream, _) = self.0.accept().await?;
        Ok((AuthorityFix::new(stream), "unix".to_owned()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Reading the client's preface.
    Preface,
    /// Following frames.
    Frames,
    /// Not HTTP/2 in the clear: every byte as it is.
    Through,
}

/// A header block being gathered: its first frame's stream, flags and
/// priority fields, and the fragments so far.
struct Block {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    fragments: Vec<u8>,
}

/// A client's side of a connection, with `:authority` made valid.
pub(crate) struct AuthorityFix<S> {
    inner: S,
    stage: Stage,
    /// Bytes read from the client and not yet looked at.
    input: BytesMut,
    /// Bytes ready for hyper.
    output: BytesMut,
    /// Payload bytes of the current pass-through frame still to come.
    through: usize,
    block: Option<Block>,
    /// The client's HPACK context.
    decoder: hpack::Decoder,
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> AuthorityFix<S> {
        AuthorityFix {
            inner,
            stage: Stage::Preface,
            input: BytesMut::new(),
            output: BytesMut::new(),
            through: 0,
            block: None,
            decoder: hpack::Decoder::new(DYNAMIC_TABLE_BYTES),
        }
    }

    /// Moves what can be decided of `input` to `output`.
    fn process(&mut self) -> io::Result<()> {
        loop {
            match self.stage {
                Stage::Through => {
                    let all = self.input.split();
                    self.output.unsplit(all);
                    return Ok(());
                }
                Stage::Preface => {
                    let n = self.input.len().min(PREFACE.len());
                    if self.input[..n] != PREFACE[..n] {
                        self.stage = Stage::Through;
                        continue;
                    }
                    if n < PREFACE.len() {
                        return Ok(());
                    }
                    let preface = self.input.split_to(PREFACE.len());
                    self.output.unsplit(preface);
                    self.stage = Stage::Frames;
                }
                Stage::Frames => {
                    if self.through > 0 {
                        let n = self.through.min(self.input.len());
                        if n == 0 {
                            return Ok(());
                        }
                        let part = self.input.split_to(n);
                        self.output.unsplit(part);
                        self.through -= n;
                        continue;
                    }
                    if self.input.len() < 9 {
                        return Ok(());
                    }
                    let len = (usize::from(self.input[0]) << 16)
                        | (usize::from(self.input[1]) << 8)
                        | usize::from(self.input[2]);
                    let kind = self.input[3];
                    let flags = self.input[4];
                    let stream = u32::from_be_bytes([
                        self.input[5],
                        self.input[6],
                        self.input[7],
                        self.input[8],
                    ]) & 0x7fff_ffff;
                    let in_block = self.block.is_some();
                    if kind != HEADERS && !(kind == CONTINUATION && in_block) {
                        let head = self.input.split_to(9);
                        self.output.unsplit(head);
                        self.through = len;
                        continue;
                    }
                    // The whole frame is gathered here before hyper sees
                    // it, so its size is bounded here.
                    if len > MAX_BLOCK_BYTES {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "a HEADERS frame larger than any request's",
                        ));
                    }
                    if self.input.len() < 9 + len {
                        self.input.reserve(9 + len - self.input.len());
                        return Ok(());
                    }
                    let mut frame = self.input.split_to(9 + len);
                    frame.advance(9);
                    self.gather(kind, flags, stream, frame)?;
                }
            }
        }
    }

    /// How many of `bytes`, just read, may go to hyper as they are: whole
    /// frames other than header blocks, and the start of one whose payload
    /// runs past them. Stops at a header block, or at a frame header that
    /// is cut short. Updates `through` for the frame left open.
    fn frames_in_place(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        loop {
            let n = self.through.min(bytes.len() - at);
            at += n;
            self.through -= n;
            if at == bytes.len() || self.block.is_some() {
                return at;
            }
            let Some(head) = bytes.get(at..at + 9) else {
                return at;
            };
            if head[3] == HEADERS || head[3] == CONTINUATION {
                return at;
            }
            let len =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            at += 9;
            self.through = len;
        }
    }

    /// Adds one HEADERS or CONTINUATION frame's payload to the block, and
    /// writes the block out once it ends.
    fn gather(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        mut payload: BytesMut,
    ) -> io::Result<()> {
        let malformed = || io::Error::new(io::ErrorKind::InvalidData, "a malformed HEADERS frame");
        if kind == HEADERS {
            let pad = if flags & PADDED != 0 {
                if payload.is_empty() {
                    return Err(malformed());
                }
                usize::from(payload.get_u8())
            } else {
                0
            };
            let priority = if flags & PRIORITY != 0 {
                if payload.len() < 5 {
                    return Err(malformed());
                }
                let mut p = [0; 5];
                payload.copy_to_slice(&mut p);
                Some(p)
            } else {
                None
            };
            if pad > payload.len() {
                return Err(malformed());
            }
            payload.truncate(payload.len() - pad);
            self.block = Some(Block {
                stream,
                flags,
                priority,
                fragments: Vec::new(),
            });
        }
        let block = self
            .block
            .as_mut()
            .expect("a HEADERS frame began the block");
        block.fragments.extend_from_slice(&payload);
        if block.fragments.len() > MAX_BLOCK_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a header block larger than any request's",
            ));
        }
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let block = self.block.take().expect("just filled");
        let encoded = self.reencode(&block.fragments)?;
        write_block(&mut self.output, &block, &encoded);
        Ok(())
    }

    /// The block decoded with the client's context and written again as
    /// literals without indexing, `:authority` made valid.
    fn reencode(&mut self, fragments: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(fragments.len() * 2 + 64);
        self.decoder
            .decode(fragments, |name, value| {
                let value = if name == b":authority" {
                    valid_authority(value)
                } else {
                    Cow::Borrowed(value)
                };
                // A literal header field without indexing, with a new name.
                out.push(0);
                write_string(&mut out, name);
                write_string(&mut out, &value);
            })
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("HPACK: {}", e.0)))?;
        Ok(out)
    }
}

/// HPACK's string form: a 7-bit-prefix length (no Huffman coding), then
/// the bytes.
fn write_string(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut len = bytes.len();
    if len < 127 {
        out.push(len as u8);
    } else {
        out.push(127);
        len -= 127;
        while len >= 128 {
            out.push((len % 128) as u8 | 0x80);
            len /= 128;
        }
        out.push(len as u8);
    }
    out.extend_from_slice(bytes);
}

/// `value` if it is a valid authority, else `localhost`: what a Unix
/// socket's clients mean, and what grpc-go and the Rust clients send.
fn valid_authority(value: &[u8]) -> Cow<'_, [u8]> {
    if hyper::http::uri::Authority::try_from(value).is_ok() {
        Cow::Borrowed(value)
    } else {
        Cow::Borrowed(b"localhost")
    }
}

/// Writes `encoded` as `block`'s HEADERS frame and as many CONTINUATION
/// frames as it needs.
fn write_block(output: &mut BytesMut, block: &Block, encoded: &[u8]) {
    let first_room = FRAME_BYTES - if block.priority.is_some() { 5 } else { 0 };
    let (first, rest) = encoded.split_at(encoded.len().min(first_room));
    let mut chunks = rest.chunks(FRAME_BYTES).peekable();
    let end_headers = if chunks.peek().is_none() {
        END_HEADERS
    } else {
        0
    };
    let flags = (block.flags & (END_STREAM | PRIORITY)) | end_headers;
    let priority = block.priority.as_ref().map_or(&[][..], |p| &p[..]);
    frame_head(
        output,
        priority.len() + first.len(),
        HEADERS,
        flags,
        block.stream,
    );
    output.put_slice(priority);
    output.put_slice(first);
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            END_HEADERS
        } else {
            0
        };
        frame_head(output, chunk.len(), CONTINUATION, flags, block.stream);
        output.put_slice(chunk);
    }
}

fn frame_head(output: &mut BytesMut, len: usize, kind: u8, flags: u8, stream: u32) {
    output.put_slice(&(len as u32).to_be_bytes()[1..]);
    output.put_u8(kind);
    output.put_u8(flags);
    output.put_u32(stream);
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.output.is_empty() {
                let n = this.output.len().min(buf.remaining());
                buf.put_slice(&this.output[..n]);
                this.output.advance(n);
                return Poll::Ready(Ok(()));
            }
            // Nothing held back: read straight into hyper's buffer, and
            // look at what came in place. Frames other than header blocks
            // stay where they are; from the first header block (or a
            // frame header cut short) on, the bytes are taken back to be
            // worked on here.
            let direct = this.input.is_empty() && this.stage != Stage::Preface;
            if direct {
                let before = buf.filled().len();
                ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
                let got = buf.filled().len() - before;
                if this.stage == Stage::Through || got == 0 {
                    return Poll::Ready(Ok(()));
                }
                let keep = this.frames_in_place(&buf.filled()[before..]);
                if keep < got {
                    this.input.extend_from_slice(&buf.filled()[before + keep..]);
                    buf.set_filled(before + keep);
                }
                if keep > 0 {
                    return Poll::Ready(Ok(()));
                }
                // Everything read was taken back: work on it.
                continue;
            }
            this.process()?;
            if !this.output.is_empty() {
                continue;
            }
            // More bytes are needed to decide.
            let old = this.input.len();
            this.input.resize(old + READ_BYTES, 0);
            let mut read = ReadBuf::new(&mut this.input[old..]);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
            let n = read.filled().len();
            this.input.truncate(old + n);
            ready!(polled)?;
            if n == 0 {
                // The client closed: whatever is left goes to hyper as it
                // is, which words the error.
                let rest = this.input.split();
                this.output.unsplit(rest);
                if this.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        frame_head(&mut out, payload.len(), kind, flags, stream);
        out.put_slice(payload);
        out.to_vec()
    }

    /// What comes out of the fix for `input`, written in pieces of `piece`
    /// bytes.
    async fn through_fix(input: &[u8], piece: usize) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut fixed = AuthorityFix::new(server);
        for part in input.chunks(piece) {
            client.write_all(part).await.unwrap();
        }
        drop(client);
        let mut out = Vec::new();
        fixed.read_to_end(&mut out).await.unwrap();
        out
    }

    /// Splits `bytes` (after the preface) into frames: (kind, flags,
    /// payload).
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
        let mut all = Vec::new();
        while !bytes.is_empty() {
            let len = (usize::from(bytes[0]) << 16)
                | (usize::from(bytes[1]) << 8)
                | usize::from(bytes[2]);
            all.push((bytes[3], bytes[4], bytes[9..9 + len].to_vec()));
            bytes = &bytes[9 + len..];
        }
        all
    }

    #[tokio::test]
    async fn an_invalid_authority_becomes_localhost_and_data_passes_untouched() {
        // The client's encoder indexes every field and Huffman-codes every
        // string, as grpcio does.
        let mut client_hpack = httlib_hpack::Encoder::with_dynamic_size(4096);
        let request = |authority: &[u8], encoder: &mut httlib_hpack::Encoder<'_>| {
            let mut block = Vec::new();
            let flags = httlib_hpack::Encoder::BEST_FORMAT;
            for (name, value) in [
                (&b":method"[..], &b"POST"[..]),
                (b":scheme", b"http"),
                (b":path", b"/inference.GRPCInferenceService/ServerReady"),
                (b":authority", authority),
                (b"te", b"trailers"),
                // Longer than 126 bytes: a multi-byte length.
                (b"x-long", &[b'v'; 300][..]),
            ] {
                encoder
                    .encode((name.to_vec(), value.to_vec(), flags), &mut block)
                    .unwrap();
            }
            block
        };
        let first = request(b"tmp%2Fgrpc.sock", &mut client_hpack);
        // The second request refers to the first's entries by index.
        let second = request(b"tmp%2Fgrpc.sock", &mut client_hpack);
        let third = request(b"example.com:80", &mut client_hpack);
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[])); // SETTINGS
                                             // A padded HEADERS frame cut into a CONTINUATION.
        let mut padded = vec![3u8];
        padded.extend_from_slice(&first[..10]);
        padded.extend_from_slice(&[0, 0, 0]);
        input.extend(frame(HEADERS, PADDED, 1, &padded));
        input.extend(frame(CONTINUATION, END_HEADERS, 1, &first[10..]));
        input.extend(frame(0x0, END_STREAM, 1, &data));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &second));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 5, &third));
        for piece in [1, 7, 4096, input.len()] {
            let out = through_fix(&input, piece).await;
            assert_eq!(&out[..PREFACE.len()], PREFACE);
            let got = frames(&out[PREFACE.len()..]);
            let kinds: Vec<u8> = got.iter().map(|f| f.0).collect();
            assert_eq!(
                kinds,
                [0x4, HEADERS, 0x0, HEADERS, HEADERS],
                "pieces of {piece}"
            );
            assert_eq!(got[2].2, data);
            // h2's side: one decoder for the whole connection.
            let mut server_hpack = httlib_hpack::Decoder::with_dynamic_size(4096);
            let authorities: Vec<Vec<u8>> = [1, 3, 4]
                .iter()
                .map(|&i| {
                    assert_eq!(got[i].1 & END_HEADERS, END_HEADERS);
                    let mut fields = Vec::new();
                    server_hpack
                        .decode(&mut got[i].2.clone(), &mut fields)
                        .unwrap();
                    let long = fields.iter().find(|(n, _, _)| n == b"x-long").unwrap();
                    assert_eq!(long.1, vec![b'v'; 300]);
                    fields
                        .into_iter()
                        .find(|(n, _, _)| n == b":authority")
                        .unwrap()
                        .1
                })
                .collect();
            assert_eq!(
                authorities,
                [
                    b"localhost".to_vec(),
                    b"localhost".to_vec(),
                    b"example.com:80".to_vec()
                ]
            );
            assert_eq!(got[3].1 & END_STREAM, END_STREAM);
        }
    }

    #[tokio::test]
    async fn anything_but_http2_passes_as_it_is() {
        let tls_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 and so on".to_vec();
        assert_eq!(through_fix(&tls_hello, 3).await, tls_hello);
    }

    #[test]
    fn a_huge_headers_frame_is_refused_before_it_is_gathered() {
        let mut fix = AuthorityFix::new(());
        fix.input.extend_from_slice(PREFACE);
        let mut head = BytesMut::new();
        frame_head(&mut head, (1 << 24) - 1, HEADERS, 0, 1);
        fix.input.extend_from_slice(&head);
        let e = fix.process().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(fix.input.capacity() < 1 << 20);
    }

    /// Header blocks of random bytes, and random frames: errors, never a
    /// panic.
    #[test]
    fn random_header_blocks_are_errors_not_panics() {
        let mut next = crate::net::hpack::xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let block: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut fix = AuthorityFix::new(());
            let _ = fix.reencode(&block);
            let mut frames = PREFACE.to_vec();
            let mut head = BytesMut::new();
            frame_head(&mut head, len, (next() % 10) as u8, next() as u8, 1);
            frames.extend_from_slice(&head);
            frames.extend_from_slice(&block);
            let mut fix = AuthorityFix::new(());
            fix.input.extend_from_slice(&frames);
            let _ = fix.process();
        }
    }
}
