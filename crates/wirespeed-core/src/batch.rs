//! Requests joined along dimension 0 into one batch, and a batch's outputs
//! cut back into each request's own rows: what a batcher does to tensors.
//!
//! Each element is copied once each way: every request's input goes once
//! into the batch's buffer ([`concat`]), and every row of an output once
//! into its request's buffer ([`split`]). `BYTES` elements are moved, not
//! copied.
//!
//! ```
//! use wirespeed_core::{batch, Tensor, TensorData};
//!
//! let row = |v: f32| vec![Tensor::new("x", vec![1, 2], TensorData::Fp32(vec![v, v]))];
//! let joined = batch::concat(vec![row(1.0), row(2.0)]).unwrap();
//! assert_eq!(joined[0].shape, vec![2, 2]);
//! let back = batch::split(joined, &[1, 1]).unwrap();
//! assert_eq!(back[1][0].data, TensorData::Fp32(vec![2.0, 2.0]));
//! ```

use crate::{element_count, Tensor, TensorData};

/// The rows of a request: the first dimension its inputs share, if every
/// input has one and they agree.
pub fn rows(inputs: &[Tensor]) -> Option<usize> {
    let first = *inputs.first()?.shape.first()?;
    inputs
        .iter()
        .all(|t| t.shape.first() == Some(&first))
        .then_some(first)
}

/// Joins the inputs of several requests along dimension 0. Every part
/// lists the same inputs in the same order, with the same datatypes and
/// the same dimensions after the first (the batcher groups requests so);
/// anything else is an error naming the input.
pub fn concat(parts: Vec<Vec<Tensor>>) -> Result<Vec<Tensor>, String> {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Ok(Vec::new());
    };
    let rest: Vec<Vec<Tensor>> = parts.collect();
    let mut joined = Vec::with_capacity(first.len());
    for (i, head) in first.into_iter().enumerate() {
        let mut rows = *head.shape.first().ok_or_else(|| scalar(&head.name))?;
        let mut elements = head.data.len();
        for part in &rest {
            let t = part
                .get(i)
                .filter(|t| t.name == head.name)
                .ok_or_else(|| format!("a request in the batch lacks input '{}'", head.name))?;
            if t.datatype() != head.datatype() || t.shape.get(1..) != head.shape.get(1..) {
                return Err(format!(
                    "input '{}' differs in datatype or shape within the batch",
                    head.name
                ));
            }
            rows += t.shape[0];
            elements += t.data.len();
        }
        let mut data = TensorData::with_capacity(head.datatype(), elements);
        append(&mut data, head.data);
        let mut shape = head.shape;
        shape[0] = rows;
        joined.push(Tensor {
            name: head.name,
            shape,
            data,
            parameters: Vec::new(),
        });
    }
    for part in rest {
        for (t, into) in part.into_iter().zip(joined.iter_mut()) {
            append(&mut into.data, t.data);
        }
    }
    Ok(joined)
}

fn scalar(name: &str) -> String {
    format!("input '{name}' has no dimension to batch along")
}

/// Moves `src`'s elements onto the end of `dst`, of the same datatype.
fn append(dst: &mut TensorData, src: TensorData) {
    macro_rules! pairs {
        ($($variant:ident),*) => {
            match (dst, src) {
                $((TensorData::$variant(d), TensorData::$variant(mut s)) => d.append(&mut s),)*
                (d, s) => unreachable!(
                    "datatypes were checked: {} and {}",
                    d.datatype(),
                    s.datatype()
                ),
            }
        };
    }
    pairs!(
        Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Fp16, Fp32, Fp64, Bf16,
        Bytes
    );
}

/// Cuts a batch's outputs back into each request's rows: request `k` gets
/// `rows[k]` rows of every output, in order. An output whose first
/// dimension is not the batch's rows is an error naming it.
pub fn split(outputs: Vec<Tensor>, rows: &[usize]) -> Result<Vec<Vec<Tensor>>, String> {
    let total: usize = rows.iter().sum();
    let mut answers: Vec<Vec<Tensor>> = rows
        .iter()
        .map(|_| Vec::with_capacity(outputs.len()))
        .collect();
    for output in outputs {
        if output.shape.first() != Some(&total) {
            return Err(format!(
                "output '{}' has shape {}, which does not have the batch's {total} rows first",
                output.name,
                crate::format_shape(&output.shape)
            ));
        }
        let row_len = element_count(&output.shape[1..]);
        let Some(row_len) = row_len.filter(|n| n.checked_mul(total) == Some(output.data.len()))
        else {
            return Err(format!(
                "output '{}' has shape {} but {} elements",
                output.name,
                crate::format_shape(&output.shape),
                output.data.len()
            ));
        };
        let mut pieces = cut(output.data, row_len, rows).into_iter();
        for (k, answer) in answers.iter_mut().enumerate() {
            let mut shape = output.shape.clone();
            shape[0] = rows[k];
            answer.push(Tensor {
                name: output.name.clone(),
                shape,
                data: pieces.next().expect("one piece per request"),
                parameters: output.parameters.clone(),
            });
        }
    }
    Ok(answers)
}

/// `data` in consecutive pieces of `rows[k] * row_len` elements.
fn cut(data: TensorData, row_len: usize, rows: &[usize]) -> Vec<TensorData> {
    /// Plain elements: each piece one `memcpy` from the batch's buffer.
    fn copied<T: Copy>(v: &[T], row_len: usize, rows: &[usize]) -> Vec<Vec<T>> {
        let mut start = 0;
        rows.iter()
            .map(|&r| {
                let end = start + r * row_len;
                let piece = v[start..end].to_vec();
                start = end;
                piece
            })
            .collect()
    }
    macro_rules! each {
        ($($variant:ident),*) => {
            match data {
                $(TensorData::$variant(v) => copied(&v, row_len, rows)
                    .into_iter()
                    .map(TensorData::$variant)
                    .collect(),)*
                // Byte strings move to their request; none is copied.
                TensorData::Bytes(v) => {
                    let mut v = v.into_iter();
                    rows.iter()
                        .map(|&r| TensorData::Bytes(v.by_ref().take(r * row_len).collect()))
                        .collect()
                }
            }
        };
    }
    each!(Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Fp16, Fp32, Fp64, Bf16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str, shape: Vec<usize>, data: TensorData) -> Tensor {
        Tensor {
            name: name.into(),
            shape,
            data,
            parameters: Vec::new(),
        }
    }

    #[test]
    fn rows_are_the_shared_first_dimension() {
        let a = t("a", vec![3, 2], TensorData::Fp32(vec![0.0; 6]));
        let b = t("b", vec![3], TensorData::Int64(vec![0; 3]));
        assert_eq!(rows(&[a.clone(), b.clone()]), Some(3));
        let c = t("c", vec![2], TensorData::Int64(vec![0; 2]));
        assert_eq!(rows(&[a.clone(), c]), None);
        let s = t("s", vec![], TensorData::Int64(vec![0]));
        assert_eq!(rows(&[s]), None);
        assert_eq!(rows(&[]), None);
    }

    #[test]
    fn concat_then_split_gives_each_request_its_own_rows() {
        let request = |k: usize, rows: usize| {
            let floats: Vec<f32> = (0..rows * 2).map(|i| (k * 100 + i) as f32).collect();
            let words: Vec<Vec<u8>> = (0..rows).map(|i| format!("{k}-{i}").into_bytes()).collect();
            vec![
                t("x", vec![rows, 2], TensorData::Fp32(floats)),
                t("w", vec![rows], TensorData::Bytes(words)),
            ]
        };
        let sizes = [1, 3, 2];
        let parts: Vec<Vec<Tensor>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &r)| request(k, r))
            .collect();
        let expected = parts.clone();
        let joined = concat(parts).unwrap();
        assert_eq!(joined[0].shape, vec![6, 2]);
        assert_eq!(joined[1].shape, vec![6]);
        let back = split(joined, &sizes).unwrap();
        assert_eq!(back, expected);
    }

    #[test]
    fn mismatches_are_named() {
        let a = vec![t("x", vec![1, 2], TensorData::Fp32(vec![0.0; 2]))];
        let b = vec![t("x", vec![1, 3], TensorData::Fp32(vec![0.0; 3]))];
        assert!(concat(vec![a.clone(), b]).unwrap_err().contains("'x'"));
        let c = vec![t("x", vec![1, 2], TensorData::Fp64(vec![0.0; 2]))];
        assert!(concat(vec![a.clone(), c]).unwrap_err().contains("'x'"));
        let d = vec![t("y", vec![1, 2], TensorData::Fp32(vec![0.0; 2]))];
        assert!(concat(vec![a.clone(), d])
            .unwrap_err()
            .contains("lacks input 'x'"));
        let out = t("p", vec![3], TensorData::Fp32(vec![0.0; 3]));
        let e = split(vec![out], &[1, 1]).unwrap_err();
        assert!(e.contains("'p'") && e.contains("2 rows"), "{e}");
        // A model's output whose data disagrees with its shape is an error,
        // never a slice out of bounds.
        for data in [
            TensorData::Fp32(vec![0.0; 3]),
            TensorData::Bytes(vec![b"a".to_vec(); 3]),
        ] {
            let short = t("q", vec![2, 2], data);
            let e = split(vec![short], &[1, 1]).unwrap_err();
            assert!(e.contains("'q'") && e.contains("3 elements"), "{e}");
        }
        let huge = t("h", vec![2, usize::MAX], TensorData::Fp32(Vec::new()));
        assert!(split(vec![huge], &[1, 1]).unwrap_err().contains("'h'"));
    }
}
