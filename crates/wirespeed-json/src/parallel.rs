//! Decoding one large run of numbers on several cores.
//!
//! A region of a chunk that holds `number ws , ws` repetitions is cut at
//! commas into one piece per thread. The first piece is decoded on this
//! thread straight onto the end of the output buffer while each other piece
//! is decoded on a helper into a buffer of its own; then those are appended
//! in order. The conversion is the sequential path's, so results are
//! bit-identical.
//!
//! Nothing is scanned before the decoding starts: not the commas (counting
//! them to place each piece in the output cost more than appending the
//! helpers' values), nor the array's end. A piece stops at the first thing
//! that is not a plain number and comma (the array's `]`, a string, a bad
//! token); everything decoded before that point is kept, and the caller's
//! sequential path goes on from there and words any error.

use crate::builder::Float;
use crate::number;
use crate::run;

/// A run of numbers this long or longer, within one chunk given to
/// [`RequestDecoder::feed`](crate::RequestDecoder::feed), is decoded on
/// [`DecodeOptions::threads`](crate::DecodeOptions::threads) threads;
/// shorter ones are not worth a hand-over.
pub const MIN_REGION_BYTES: usize = 256 * 1024;

/// How many bytes of `bytes` a parallel decode may take: up to its last
/// comma, if that is long enough to be worth threads.
pub(crate) fn region(bytes: &[u8]) -> Option<usize> {
    let len = memchr::memrchr(b',', bytes)? + 1;
    (len >= MIN_REGION_BYTES).then_some(len)
}

/// Decodes `region` (from [`region`]) onto the end of `values`, at most
/// `room` values, on `threads` threads. Returns the bytes taken (the start
/// of the first value not taken) and the values added.
pub(crate) fn decode_region<T: Float + Send>(
    region: &[u8],
    values: &mut Vec<T>,
    room: usize,
    threads: usize,
) -> (usize, usize) {
    let threads = threads.clamp(1, 16);
    // Cut points: just after the comma nearest each even share.
    let mut cuts = vec![0];
    for k in 1..threads {
        let target = region.len() * k / threads;
        let from = (*cuts.last().expect("starts with 0")).max(target);
        match memchr::memchr(b',', &region[from..]) {
            Some(i) if from + i + 1 < region.len() => cuts.push(from + i + 1),
            _ => break,
        }
    }
    cuts.push(region.len());
    let pieces: Vec<&[u8]> = cuts.windows(2).map(|w| &region[w[0]..w[1]]).collect();

    let old = values.len();
    // rayon's pool keeps its threads: handing a piece over costs a wake-up,
    // not a thread's creation (tens of µs a region, measurable per request).
    // This thread decodes the first piece meanwhile.
    let mut rest: Vec<(usize, usize, Vec<T>)> = Vec::with_capacity(pieces.len() - 1);
    rest.resize_with(pieces.len() - 1, || (0, 0, Vec::new()));
    let first = rayon::in_place_scope(|scope| {
        for (&piece, slot) in pieces[1..].iter().zip(rest.iter_mut()) {
            scope.spawn(move |_| {
                // A piece of n bytes holds at most n / 2 values ("0,").
                let mut own = Vec::with_capacity((piece.len() / 2).min(room));
                let (used, n) = decode_piece(piece, room, |v| own.push(v));
                *slot = (used, n, own);
            });
        }
        decode_piece(pieces[0], room, |v| values.push(v))
    });
    // Pieces are kept in order while each one was taken whole and fits.
    let (mut used, mut added) = first;
    if used == pieces[0].len() {
        for ((piece, (piece_used, n, own)), _) in pieces[1..].iter().zip(rest).zip(0..) {
            if added + n > room {
                break;
            }
            values.extend_from_slice(&own);
            used += piece_used;
            added += n;
            if piece_used < piece.len() {
                break;
            }
        }
    }
    debug_assert_eq!(values.len(), old + added);
    (used, added)
}

/// Decodes the `number ws , ws` repetitions at the start of `piece`,
/// handing at most `room` values to `push`. Returns the bytes taken (just
/// after the last value's comma and its whitespace) and the values pushed.
fn decode_piece<T: Float>(piece: &[u8], room: usize, mut push: impl FnMut(T)) -> (usize, usize) {
    let is_ws = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    let mut pos = 0;
    let mut added = 0;
    while added < room {
        while pos < piece.len() && is_ws(piece[pos]) {
            pos += 1;
        }
        // Most values, many at a time, as the sequential path takes them.
        let (used, n) = run::plain_run(&piece[pos..], room - added, &mut push);
        if n > 0 {
            pos += used;
            added += n;
            continue;
        }
        let rest = &piece[pos..];
        let (value, mut end) = match number::scan_decimal(rest)
            .and_then(|d| T::from_decimal(d).map(|v| (v, d.len)))
        {
            Some(taken) => taken,
            None => {
                let end = rest
                    .iter()
                    .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')))
                    .unwrap_or(rest.len());
                let token = &rest[..end];
                if token.is_empty() || number::check_grammar(token).is_err() {
                    break;
                }
                (T::from_token(token), end)
            }
        };
        while end < rest.len() && is_ws(rest[end]) {
            end += 1;
        }
        if rest.get(end) != Some(&b',') {
            break;
        }
        push(value);
        added += 1;
        pos += end + 1;
    }
    (pos, added)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> String {
        (0..n)
            .map(|i| format!("{:?}", (i as f64 * 0.37).sin() * 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn bits<T: Into<f64> + Copy>(v: &[T]) -> Vec<u64> {
        v.iter().map(|&x| x.into().to_bits()).collect()
    }

    #[test]
    fn any_thread_count_gives_the_sequential_values() {
        let text = body(40_000) + ", 1]";
        let len = region(text.as_bytes()).unwrap();
        let sequential: Vec<f32> = text[..len]
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse().unwrap())
            .collect();
        assert_eq!(sequential.len(), 40_000);
        for threads in [1, 2, 3, 8] {
            let mut out = vec![7f32];
            assert_eq!(
                decode_region(&text.as_bytes()[..len], &mut out, 40_000, threads),
                (len, 40_000)
            );
            assert_eq!(out[0], 7.0, "values before the region stay");
            assert_eq!(bits(&out[1..]), bits(&sequential));
            // Less room than values: a prefix, ending where the next value starts.
            let mut full = vec![0f32; 1];
            let (used, n) = decode_region(&text.as_bytes()[..len], &mut full, 39_999, threads);
            assert!(n < 40_000 && full.len() == 1 + n, "{threads}: {n}");
            assert_eq!(bits(&full[1..]), bits(&sequential[..n]));
            assert_eq!(
                text[used..]
                    .split(',')
                    .next()
                    .unwrap()
                    .trim()
                    .parse::<f32>(),
                Ok(sequential[n])
            );
        }
    }

    #[test]
    fn anything_unusual_stops_it_there_and_keeps_what_came_before() {
        let good = body(40_000);
        let before: Vec<f64> = good.split(", ").map(|s| s.parse().unwrap()).collect();
        for bad in ["01", "[2", "\"s\"", "1.", "NaN", ",", "]", "1]"] {
            let text = format!("{good}, {bad}, {good}, 5,");
            let len = region(text.as_bytes()).unwrap();
            for threads in [1, 2, 3] {
                let mut out = Vec::<f64>::new();
                let (used, n) =
                    decode_region(&text.as_bytes()[..len], &mut out, usize::MAX, threads);
                assert_eq!(n, before.len(), "{bad}");
                assert_eq!(bits(&out), bits(&before), "{bad}");
                assert!(
                    text[used..].starts_with(bad),
                    "{bad}: {:?}",
                    &text[used..used + 10]
                );
            }
        }
        // A bad token at the very start: nothing taken.
        let text = format!("01, {good},");
        let mut out = Vec::<f32>::new();
        assert_eq!(
            decode_region(text.as_bytes(), &mut out, usize::MAX, 2),
            (0, 0)
        );
        assert!(out.is_empty());
    }
}
