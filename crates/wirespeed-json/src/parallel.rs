//! Decoding one large run of numbers on several cores.
//!
//! A region of a chunk that holds only `number ws , ws` repetitions is cut
//! at commas into one piece per thread. Counting commas (memchr, many GB/s)
//! tells how many values each piece holds, so each thread parses its piece
//! straight into its own slice of the output buffer. The conversion is the
//! sequential path's, so results are bit-identical; on anything unexpected
//! the caller falls back to the sequential path, which words the error.

use crate::builder::Float;
use crate::number;
use crate::run;

/// Regions shorter than this are not worth a thread.
pub(crate) const MIN_REGION_BYTES: usize = 256 * 1024;

/// How many bytes of `bytes` a parallel decode may take: up to the last
/// comma before the array's end (or the end of `bytes`), if that is long
/// enough to be worth threads.
pub(crate) fn region(bytes: &[u8]) -> Option<usize> {
    let end = memchr::memchr(b']', bytes).unwrap_or(bytes.len());
    let len = memchr::memrchr(b',', &bytes[..end])? + 1;
    (len >= MIN_REGION_BYTES).then_some(len)
}

/// Decodes `region` (from [`region`]) onto the end of `values`, on `threads`
/// threads, if it holds at most `room` values. Returns how many it added;
/// `None`, with `values` unchanged, when anything in it is not a plain number
/// followed by a comma.
pub(crate) fn decode_region<T: Float + Send>(
    region: &[u8],
    values: &mut Vec<T>,
    room: usize,
    threads: usize,
) -> Option<usize> {
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

    // Each thread counts its piece's values (one per comma), so the output
    // can be cut into one slice per piece; then each parses into its slice.
    let counts: Vec<usize> = on_threads(&pieces, |piece| memchr::memchr_iter(b',', piece).count());
    let n: usize = counts.iter().sum();
    if n > room {
        return None;
    }
    let old = values.len();
    values.resize(old + n, T::default());
    let mut slots = Vec::with_capacity(pieces.len());
    let mut rest = &mut values[old..];
    for &count in &counts {
        let (mine, tail) = rest.split_at_mut(count);
        slots.push(mine);
        rest = tail;
    }
    let work: Vec<(&[u8], &mut [T])> = pieces.into_iter().zip(slots).collect();
    let ok = std::thread::scope(|scope| {
        let mut work = work.into_iter();
        let first = work.next();
        let helpers: Vec<_> = work
            .map(|(piece, slot)| scope.spawn(move || decode_piece(piece, slot)))
            .collect();
        let ok = first.is_none_or(|(piece, slot)| decode_piece(piece, slot));
        helpers
            .into_iter()
            .fold(ok, |ok, h| h.join().unwrap_or(false) && ok)
    });
    if ok {
        Some(n)
    } else {
        values.truncate(old);
        None
    }
}

/// `f` of each item, the first on this thread and the rest on helpers.
fn on_threads<I: Sync, R: Send>(items: &[I], f: impl Fn(&I) -> R + Sync) -> Vec<R> {
    std::thread::scope(|scope| {
        let f = &f;
        let helpers: Vec<_> = items[1..]
            .iter()
            .map(|item| scope.spawn(move || f(item)))
            .collect();
        let first = f(&items[0]);
        std::iter::once(first)
            .chain(
                helpers
                    .into_iter()
                    .map(|h| h.join().expect("counting does not panic")),
            )
            .collect()
    })
}

fn decode_piece<T: Float>(piece: &[u8], out: &mut [T]) -> bool {
    let is_ws = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    let mut pos = 0;
    let mut i = 0;
    while i < out.len() {
        while pos < piece.len() && is_ws(piece[pos]) {
            pos += 1;
        }
        // Most values, many at a time, as the sequential path takes them.
        let slots = &mut out[i..];
        let mut k = 0;
        let (used, n) = run::plain_run(&piece[pos..], slots.len(), |v| {
            slots[k] = v;
            k += 1;
        });
        if n > 0 {
            pos += used;
            i += n;
            continue;
        }
        let rest = &piece[pos..];
        let value = match number::scan_decimal(rest)
            .and_then(|d| T::from_decimal(d).map(|v| (v, d.len)))
        {
            Some((v, n)) => {
                pos += n;
                v
            }
            None => {
                let end = rest
                    .iter()
                    .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-')))
                    .unwrap_or(rest.len());
                let token = &rest[..end];
                if token.is_empty() || number::check_grammar(token).is_err() {
                    return false;
                }
                pos += end;
                T::from_token(token)
            }
        };
        while pos < piece.len() && is_ws(piece[pos]) {
            pos += 1;
        }
        if piece.get(pos) != Some(&b',') {
            return false;
        }
        pos += 1;
        out[i] = value;
        i += 1;
    }
    pos == piece.len()
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
                Some(40_000)
            );
            assert_eq!(out[0], 7.0, "values before the region stay");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out[1..]), bits(&sequential));
            let mut full = vec![0f32; 1];
            assert_eq!(
                decode_region(&text.as_bytes()[..len], &mut full, 39_999, threads),
                None,
                "more values than room"
            );
            assert_eq!(full.len(), 1);
        }
    }

    #[test]
    fn anything_unusual_declines_and_leaves_the_buffer() {
        let good = body(40_000);
        for bad in ["01", "[2", "\"s\"", "1.", "NaN", ",,"] {
            let text = format!("{}, {bad}, {}, 5,", &good, &good);
            let len = region(text.as_bytes()).unwrap_or(text.len());
            let mut out = Vec::<f64>::new();
            assert_eq!(
                decode_region(&text.as_bytes()[..len], &mut out, usize::MAX, 2),
                None,
                "{bad}"
            );
            assert!(out.is_empty(), "{bad}");
        }
    }
}
