//! One request read in place: its head parsed by `httparse` from the bytes
//! that arrived, the URI and header values sliced from them without a copy,
//! the body the bytes after the head.
//!
//! Only plain requests are read here: HTTP/1.1, at most one
//! `Content-Length`, no `Transfer-Encoding`, `Expect`, `Upgrade` or
//! `Connection` other than `keep-alive`, and the whole body arrived. Anything
//! else (a chunked body, a head cut short, a smuggling attempt, HTTP/1.0, a
//! bad head, HTTP/2's preface) is [`Read::HandOver`]: hyper reads it, and
//! answers the bad ones as it always has.

use std::mem::MaybeUninit;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Request, Uri, Version};
use wirespeed_http::RequestBody;

/// What the bytes at the front of a connection's buffer hold.
// The request is the common case and goes straight to the service: boxing
// it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Read {
    /// A whole plain request, taken from the buffer.
    Request(Request<RequestBody>),
    /// A plain head whose body has `missing` bytes still to come.
    Short { missing: usize },
    /// Not a whole head yet.
    Partial,
    /// A request only hyper reads.
    HandOver,
}

/// The most bytes of `Content-Length` digits read here; longer is hyper's.
const MAX_LENGTH_DIGITS: usize = 12;

/// Header slots on the stack; a server allowing more headers takes them
/// from the heap.
const STACK_HEADERS: usize = 128;

/// Reads the request at the front of `buffer`, taking its bytes if it is a
/// whole plain request and its body is at most `max_body` bytes.
pub(crate) fn read(buffer: &mut Bytes, max_headers: usize, max_body: usize) -> Read {
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap;
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if max_headers <= STACK_HEADERS {
        &mut stack[..max_headers]
    } else {
        heap = Vec::with_capacity(max_headers);
        heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut heap
    };
    // The URI, header values and body are slices of the bytes read; what
    // follows the request (the next one, pipelined) stays a slice of them
    // too, never copied (a copy per request made a long pipeline
    // quadratic).
    let bytes = std::mem::take(buffer);
    let mut parsed = httparse::Request::new(&mut []);
    let (read, taken) = match parsed.parse_with_uninit_headers(&bytes, slots) {
        Ok(httparse::Status::Complete(head)) => plain(&parsed, &bytes, head, max_body),
        Ok(httparse::Status::Partial) => (Read::Partial, 0),
        Err(_) => (Read::HandOver, 0),
    };
    *buffer = bytes.slice(taken..);
    read
}

/// The request whose head `parsed` read from `bytes` (`head` bytes), and
/// how many bytes it takes, if it is plain; nothing taken otherwise.
fn plain(
    parsed: &httparse::Request<'_, '_>,
    bytes: &Bytes,
    head: usize,
    max_body: usize,
) -> (Read, usize) {
    if parsed.version != Some(1) {
        return (Read::HandOver, 0);
    }
    let mut length: Option<usize> = None;
    for header in parsed.headers.iter() {
        let name = header.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let digits = header.value;
            if length.is_some()
                || digits.is_empty()
                || digits.len() > MAX_LENGTH_DIGITS
                || !digits.iter().all(u8::is_ascii_digit)
            {
                return (Read::HandOver, 0);
            }
            length = Some(digits.iter().fold(0, |n, d| n * 10 + usize::from(d - b'0')));
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
            || (name.eq_ignore_ascii_case(b"connection")
                && !header.value.eq_ignore_ascii_case(b"keep-alive"))
        {
            return (Read::HandOver, 0);
        }
    }
    let body_length = length.unwrap_or(0);
    if body_length > max_body {
        return (Read::HandOver, 0);
    }
    let arrived = bytes.len() - head;
    if arrived < body_length {
        return (
            Read::Short {
                missing: body_length - arrived,
            },
            0,
        );
    }
    match build(parsed, bytes, bytes.slice(head..head + body_length)) {
        Some(request) => (Read::Request(request), head + body_length),
        // `http` refused a URI or header httparse passed (rare): hyper
        // answers it.
        None => (Read::HandOver, 0),
    }
}

fn build(
    parsed: &httparse::Request<'_, '_>,
    bytes: &Bytes,
    body: Bytes,
) -> Option<Request<RequestBody>> {
    let method = Method::from_bytes(parsed.method?.as_bytes()).ok()?;
    let uri = Uri::from_maybe_shared(bytes.slice_ref(parsed.path?.as_bytes())).ok()?;
    let mut map = HeaderMap::with_capacity(parsed.headers.len());
    for header in parsed.headers.iter() {
        let name = HeaderName::from_bytes(header.name.as_bytes()).ok()?;
        let value = HeaderValue::from_maybe_shared(bytes.slice_ref(header.value)).ok()?;
        map.append(name, value);
    }
    let mut request = Request::new(RequestBody::whole(body));
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = map;
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: &[u8]) -> (Read, Bytes) {
        let mut buffer = Bytes::copy_from_slice(bytes);
        let read = read(&mut buffer, 100, 1 << 20);
        (read, buffer)
    }

    #[test]
    fn a_plain_request_is_read_in_place_and_leaves_the_next() {
        let (read, rest) = read_all(
            b"POST /v2/models/m/infer?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nX-A: b\r\n\r\n{}GET /v2 HTTP/1.1\r\n\r\n",
        );
        let Read::Request(request) = read else {
            panic!("not read")
        };
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri().path(), "/v2/models/m/infer");
        assert_eq!(request.uri().query(), Some("x=1"));
        assert_eq!(request.headers()["x-a"], "b");
        assert_eq!(request.headers().len(), 3);
        assert_eq!(&rest[..], b"GET /v2 HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn what_hyper_reads_is_handed_over_untouched() {
        for bytes in [
            &b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
            b"GET / HTTP/1.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
            b"GET /\x01 HTTP/1.1\r\n\r\n",
        ] {
            let (read, rest) = read_all(bytes);
            assert!(
                matches!(read, Read::HandOver),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
            assert_eq!(&rest[..], bytes);
        }
    }

    #[test]
    fn heads_and_bodies_cut_short_wait() {
        let (read, _) = read_all(b"GET /v2 HTTP/1.1\r\nHost:");
        assert!(matches!(read, Read::Partial));
        let (read, rest) = read_all(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n{}");
        assert!(matches!(read, Read::Short { missing: 3 }));
        assert_eq!(rest.len(), 40);
    }

    #[test]
    fn too_many_headers_or_too_long_a_body_is_hyper_s() {
        let mut buffer = Bytes::from_static(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n");
        assert!(matches!(read(&mut buffer, 2, 10), Read::HandOver));
        let mut buffer = Bytes::from_static(b"POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n");
        assert!(matches!(read(&mut buffer, 2, 10), Read::HandOver));
    }
}
