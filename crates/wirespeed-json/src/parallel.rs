//! Decoding one large run of numbers on several cores.
//!
//! A region of a chunk that holds `number ws , ws` repetitions is cut at
//! commas into pieces of about [`PIECE_BYTES`]. This thread takes pieces
//! from the front and decodes them straight onto the end of the output
//! buffer; helpers on a rayon pool take pieces from the back, each into a
//! small buffer of its own, and those are appended in order once the two
//! ends meet. Claiming from both ends balances the work however late a
//! helper wakes, and only the helpers' share is copied. Small buffers come
//! back warm from the allocator, where one large buffer per helper would be
//! fresh pages, faulted in on every request. The conversion is the
//! sequential path's, so results are bit-identical.
//!
//! Nothing is scanned before the decoding starts: not the commas (counting
//! them to place each piece in the output cost more than appending the
//! helpers' values), nor the array's end. A piece stops at the first thing
//! that is not a plain number and comma (the array's `]`, a string, a bad
//! token); everything decoded before that point is kept, and the caller's
//! sequential path goes on from there and words any error. When the values
//! the caller still wants are fewer than the region could hold (the rest of
//! a nested row), the region ends where that many values should end, judged
//! from the first piece, so helpers do not decode the rows beyond it.
//!
//! The helpers are the threads of the server's one CPU pool
//! ([`DecodeOptions::pool`](crate::DecodeOptions::pool)), shared with model
//! compute: the thread calling the decoder is usually one of them (a large
//! body is decoded on the pool), so one region uses every thread of the
//! pool and never more. An earlier design gave the decoder a pool of its
//! own beside rayon's global one; each hand-over there woke a worker that
//! found nothing to do and spun, taking a core from the two doing the work.
//!
//! The claims are one atomic word (front and back index); a scheduler
//! crate's parallel iterators would place pieces by index, not let this
//! thread write the front ones where they belong.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use wirespeed_core::CpuPool;

use crate::builder::Float;
use crate::number;
use crate::run;

/// A run of numbers this long or longer, within one chunk given to
/// [`RequestDecoder::feed`](crate::RequestDecoder::feed), is decoded on
/// [`DecodeOptions::threads`](crate::DecodeOptions::threads) threads;
/// shorter ones are not worth a hand-over.
pub const MIN_REGION_BYTES: usize = 256 * 1024;

/// About how many bytes each piece of a region holds: a few tens of µs of
/// work, so the two ends meet evenly, and a buffer small enough to be
/// reused from the allocator's free lists.
const PIECE_BYTES: usize = 64 * 1024;

/// A helper buffer larger than this is dropped after use, not kept.
const MAX_SCRATCH_BYTES: usize = 8 << 20;

/// How many helper buffers are kept (one per helper of each decode running
/// at once is all that is ever in use).
const MAX_SCRATCH_KEPT: usize = 16;

/// Helper buffers kept between regions: at most [`MAX_SCRATCH_KEPT`] of
/// at most [`MAX_SCRATCH_BYTES`] each, per type.
pub(crate) struct Scratch<T>(Mutex<Vec<Vec<T>>>);

impl<T> Scratch<T> {
    pub(crate) const fn new() -> Self {
        Scratch(Mutex::new(Vec::new()))
    }

    fn take(&self) -> Vec<T> {
        let mut pool = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        pool.pop().unwrap_or_default()
    }

    fn give(&self, mut buffer: Vec<T>) {
        if buffer.capacity() * std::mem::size_of::<T>() <= MAX_SCRATCH_BYTES {
            buffer.clear();
            let mut pool = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if pool.len() < MAX_SCRATCH_KEPT {
                pool.push(buffer);
            }
        }
    }
}

/// How many bytes of `bytes` a parallel decode may take: up to its last
/// comma, if that is long enough to be worth threads.
pub(crate) fn region(bytes: &[u8]) -> Option<usize> {
    let len = memchr::memrchr(b',', bytes)? + 1;
    (len >= MIN_REGION_BYTES).then_some(len)
}

/// Decodes `region` (from [`region`]) onto the end of `values`, at most
/// `room` values, on this thread and the other threads of `pool`. Returns
/// the bytes taken (up to the first value not taken, or whitespace before
/// it) and the values added.
pub(crate) fn decode_region<T: Float>(
    region: &[u8],
    values: &mut Vec<T>,
    room: usize,
    pool: Option<&CpuPool>,
) -> (usize, usize) {
    let old = values.len();
    // The pool's threads but this one, when this one is among them.
    let helpers = pool.map_or(0, |pool| pool.threads() - usize::from(pool.on_pool()));
    // Values take at least two bytes ("0,"): with room for fewer than the
    // region could hold, the first piece shows where they should end.
    let (mut taken, mut added, region) = if room.saturating_mul(2) < region.len() {
        let first = Pieces::new(region).bounds(0);
        let (used, n) = decode_piece(&region[first.clone()], room, values);
        if used < first.len() || n == room {
            return (used, n);
        }
        // Where the values should end; when that is near the region's end
        // anyway (the last chunk of a flat tensor), all of it, else a little
        // short, so helpers never start beyond the row.
        let per_value = used as f64 / n.max(1) as f64;
        let expected = used as f64 + (room - n) as f64 * per_value;
        let end = if expected >= region.len() as f64 * 0.95 {
            region.len()
        } else {
            let short = used + ((expected - used as f64) * 0.99) as usize;
            memchr::memrchr(b',', &region[..short])
                .map_or(used, |i| i + 1)
                .max(used)
        };
        if helpers == 0 || end - used < MIN_REGION_BYTES / 2 {
            let (more, m) = decode_piece(&region[used..end], room - n, values);
            return (used + more, n + m);
        }
        (used, n, &region[..end])
    } else {
        (0, 0, region)
    };
    let Some(pool) = pool.filter(|_| helpers > 0) else {
        let (more, m) = decode_piece(&region[taken..], room - added, values);
        return (taken + more, added + m);
    };
    let pieces = Pieces::new(region);
    // Piece 0 is the first piece above when that was decoded.
    let claims = Claims::new(usize::from(taken > 0), pieces.count);

    let mut helped: Vec<Helped<T>> = (0..helpers)
        .map(|_| Helped {
            buffer: T::scratch().take(),
            pieces: Vec::new(),
        })
        .collect();
    pool.scope(|scope| {
        for helped in &mut helped {
            let (claims, pieces) = (&claims, &pieces);
            scope.spawn(move |_| {
                while let Some(i) = claims.back() {
                    let piece = &region[pieces.bounds(i)];
                    let at = helped.buffer.len();
                    let (used, _) = decode_piece(piece, room, &mut helped.buffer);
                    let values = at..helped.buffer.len();
                    helped.pieces.push(HelpedPiece { i, used, values });
                }
            });
        }
        while let Some(i) = claims.front() {
            let piece = pieces.bounds(i);
            let (used, n) = decode_piece(&region[piece.clone()], room - added, values);
            taken = piece.start + used;
            added += n;
            if used < piece.len() {
                claims.stop();
                break;
            }
        }
    });
    // The helpers' pieces follow this thread's in order, while each one
    // was taken whole and fits.
    if !claims.stopped() {
        let mut done: Vec<(&[T], &HelpedPiece)> = helped
            .iter()
            .flat_map(|h| h.pieces.iter().map(|p| (&h.buffer[p.values.clone()], p)))
            .collect();
        done.sort_unstable_by_key(|(_, p)| p.i);
        for (own, p) in done {
            let piece = pieces.bounds(p.i);
            debug_assert_eq!(piece.start, taken, "pieces are contiguous");
            if added + own.len() > room {
                break;
            }
            values.extend_from_slice(own);
            taken = piece.start + p.used;
            added += own.len();
            if p.used < piece.len() {
                break;
            }
        }
    }
    for h in helped {
        T::scratch().give(h.buffer);
    }
    debug_assert_eq!(values.len(), old + added);
    (taken, added)
}

/// What one helper decoded: the values of all its pieces, one after another.
struct Helped<T> {
    buffer: Vec<T>,
    pieces: Vec<HelpedPiece>,
}

/// One piece a helper decoded: its index, the bytes it took, and where its
/// values are in the helper's buffer.
struct HelpedPiece {
    i: usize,
    used: usize,
    values: std::ops::Range<usize>,
}

/// A region cut into pieces: piece `i` starts just after the first comma
/// at or past `i * PIECE_BYTES` (piece 0 at the start) and ends where the
/// next starts, or at the region's end. Every cut is after a comma, as the
/// region's end is.
struct Pieces<'a> {
    region: &'a [u8],
    count: usize,
}

impl<'a> Pieces<'a> {
    fn new(region: &'a [u8]) -> Self {
        Pieces {
            region,
            count: region.len().div_ceil(PIECE_BYTES).max(1),
        }
    }

    fn start(&self, i: usize) -> usize {
        if i == 0 {
            return 0;
        }
        if i >= self.count {
            return self.region.len();
        }
        let from = i * PIECE_BYTES;
        memchr::memchr(b',', &self.region[from..]).map_or(self.region.len(), |c| from + c + 1)
    }

    fn bounds(&self, i: usize) -> std::ops::Range<usize> {
        self.start(i)..self.start(i + 1)
    }
}

/// Which pieces are still to be decoded: indices `front..back`, packed in
/// one word so that both ends move atomically.
struct Claims {
    ends: AtomicU64,
    stop: AtomicBool,
}

impl Claims {
    fn new(front: usize, back: usize) -> Self {
        let pack = |i: usize| u64::try_from(i).expect("pieces fit a u32") & u64::from(u32::MAX);
        Claims {
            ends: AtomicU64::new(pack(front) << 32 | pack(back.max(front))),
            stop: AtomicBool::new(false),
        }
    }

    fn take(&self, from_front: bool) -> Option<usize> {
        let mut ends = self.ends.load(Ordering::Relaxed);
        loop {
            let (front, back) = (ends >> 32, ends & u64::from(u32::MAX));
            if front >= back {
                return None;
            }
            let (next, i) = if from_front {
                ((front + 1) << 32 | back, front)
            } else {
                (front << 32 | (back - 1), back - 1)
            };
            match self
                .ends
                .compare_exchange_weak(ends, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(i as usize),
                Err(now) => ends = now,
            }
        }
    }

    /// This thread's next piece.
    fn front(&self) -> Option<usize> {
        self.take(true)
    }

    /// A helper's next piece, unless this thread has stopped short: the
    /// pieces after that point are not wanted.
    fn back(&self) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        self.take(false)
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// Decodes the `number ws , ws` repetitions at the start of `piece`,
/// onto the end of `values`, at most `room` of them. Returns the bytes taken
/// (just after the last value's comma and its whitespace) and the values
/// added.
fn decode_piece<T: Float>(piece: &[u8], room: usize, values: &mut Vec<T>) -> (usize, usize) {
    let is_ws = |b: u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    let mut pos = 0;
    let mut added = 0;
    while added < room {
        while pos < piece.len() && is_ws(piece[pos]) {
            pos += 1;
        }
        // Most values, many at a time, as the sequential path takes them.
        let (used, n) = run::plain_run(&piece[pos..], room - added, values);
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
        values.push(value);
        added += 1;
        pos += end + 1;
    }
    (pos, added)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of `helpers` threads, none for 0.
    fn pool(helpers: usize) -> Option<CpuPool> {
        (helpers > 0).then(|| CpuPool::new(helpers).unwrap())
    }

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
        for threads in [0, 1, 2, 7] {
            let pool = pool(threads);
            let threads = pool.as_ref();
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
            assert!(n < 40_000 && full.len() == 1 + n, "{threads:?}: {n}");
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
    fn the_rest_of_a_nested_row_is_taken_and_no_more() {
        let rows: Vec<String> = (0..3).map(|_| body(30_000)).collect();
        let text = format!("{}], [{}], [{}],", rows[0], rows[1], rows[2]);
        let row: Vec<f32> = rows[0].split(", ").map(|s| s.parse().unwrap()).collect();
        let len = region(text.as_bytes()).unwrap();
        for threads in [0, 1, 2] {
            let pool = pool(threads);
            let threads = pool.as_ref();
            for want in [30_000, 20_000] {
                let mut out = Vec::<f32>::new();
                let (used, n) = decode_region(&text.as_bytes()[..len], &mut out, want, threads);
                // The row's last value has no comma after it: the caller's
                // sequential path takes it and the `]`.
                let expect = (want).min(29_999);
                assert!(
                    n <= expect && n > expect * 9 / 10,
                    "{threads:?} {want}: {n}"
                );
                assert_eq!(bits(&out), bits(&row[..n]));
                let next = format!("{:?}", (n as f64 * 0.37).sin() * 1e3);
                assert!(
                    text[used..].trim_start().starts_with(&next),
                    "{threads:?} {want} {n}: {:?} {next}",
                    &text[used..used + 30]
                );
            }
        }
    }

    #[test]
    fn anything_unusual_stops_it_there_and_keeps_what_came_before() {
        let good = body(40_000);
        let before: Vec<f64> = good.split(", ").map(|s| s.parse().unwrap()).collect();
        for bad in ["01", "[2", "\"s\"", "1.", "NaN", ",", "]", "1]"] {
            let text = format!("{good}, {bad}, {good}, 5,");
            let len = region(text.as_bytes()).unwrap();
            for threads in [0, 1, 2] {
                let pool = pool(threads);
                let threads = pool.as_ref();
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
            decode_region(text.as_bytes(), &mut out, usize::MAX, pool(1).as_ref()),
            (0, 0)
        );
        assert!(out.is_empty());
    }
}
