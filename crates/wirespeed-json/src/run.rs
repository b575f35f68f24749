//! The loop most bytes of a large request go through: a run of
//! `number , number , ...` in the shape Python clients write.
//!
//! Per value: one bounds check for a fixed window, [`number::plain_parts`]
//! (three words of digits at fixed places, no loop, no branch), the
//! conversion, the separator `,` or `, `, and a single branch for all their
//! checks. The lengths of json.dumps floats vary from value to value, so
//! any branch on them is mispredicted about once a value; with none, the
//! core overlaps consecutive values. Anything else (other whitespace, an
//! exponent, a long or malformed token, the end of the array or of the
//! chunk) stops the run, and the caller's general path takes that token,
//! words any error, and comes back.

use crate::builder::Float;
use crate::number::{self, PLAIN_WINDOW};

/// Decodes the run at the start of `bytes` onto the end of `values`, at
/// most `room` values. Returns the bytes consumed (just after the last
/// value's comma and one space) and the values added. It stops before the
/// first token it does not take, or when fewer than [`PLAIN_WINDOW`] bytes
/// are left; what it adds is exactly what the general path would.
///
/// Values are written into room reserved first (a value takes at least
/// two bytes), so the loop has no capacity check or length update of its
/// own per value.
///
/// Not inlined: inside the decoder's large state machine its few live
/// values would be spilled to the stack on every step.
#[inline(never)]
pub(crate) fn plain_run<T: Float>(
    bytes: &[u8],
    room: usize,
    values: &mut Vec<T>,
) -> (usize, usize) {
    values.reserve(room.min(bytes.len() / 2));
    let spare = values.spare_capacity_mut();
    let room = room.min(spare.len());
    let mut pos = 0;
    let mut added = 0;
    while added < room {
        let Some(win) = bytes.get(pos..pos + PLAIN_WINDOW) else {
            break;
        };
        let win: &[u8; PLAIN_WINDOW] = win.try_into().expect("a whole window");
        // One branch for every check.
        let (d, plain) = number::plain_parts(win);
        let (v, exact) = T::from_plain(d);
        if !(plain & exact & (win[d.len] == b',')) {
            break;
        }
        spare[added].write(v);
        added += 1;
        pos += d.len + 1 + usize::from(win[d.len + 1] == b' ');
    }
    // SAFETY: the first `added` elements of the spare capacity were written
    // above, in order.
    #[allow(unsafe_code)]
    unsafe {
        values.set_len(values.len() + added)
    };
    (pos, added)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Floats as json.dumps writes float32 values, of either sign, all in
    /// the shape the run takes.
    fn values(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let x = (0.1 + (i as f32 * 0.37).sin().abs() * 20.0)
                    * if i % 3 == 0 { -1.0 } else { 1.0 };
                format!("{:?}", f64::from(x))
            })
            .collect()
    }

    #[test]
    fn a_run_takes_plain_numbers_and_stops_where_the_general_path_must() {
        let tokens = values(60);
        let text = tokens.join(", ");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let want: Vec<f32> = tokens.iter().map(|s| s.parse().unwrap()).collect();
        for stop in [
            "NaN",
            "01",
            "1e5",
            "1.5e",
            "\"s\"",
            " 3",
            "\n3",
            "2.5 ",
            "1.25.",
            "12345678.5",
        ] {
            let body = format!("{text}, {stop}, {text}]");
            let mut got = vec![];
            let (used, n) = plain_run::<f32>(body.as_bytes(), usize::MAX, &mut got);
            assert_eq!(n, got.len());
            assert_eq!(n, tokens.len(), "{stop}");
            assert_eq!(bits(&got), bits(&want));
            assert!(
                body[used..].starts_with(stop),
                "{stop}: {:?}",
                &body[used..]
            );
        }
        // Compact separators, and room.
        let body = format!("{}]", tokens.join(","));
        let mut got = vec![];
        let (used, n) = plain_run::<f32>(body.as_bytes(), 10, &mut got);
        assert_eq!((n, got.len()), (10, 10));
        assert!(body[used..].starts_with(&tokens[10]));
        // The window never reaches past the end.
        let mut got = vec![];
        let (used, n) = plain_run::<f32>(body.as_bytes(), usize::MAX, &mut got);
        assert!(
            body.len() - used < PLAIN_WINDOW + 20,
            "{used} of {}",
            body.len()
        );
        assert_eq!(bits(&got), bits(&want[..n]));
    }
}
