//! TF Serving's REST answers (`predictions` after rows, `outputs` after
//! columns) and Clipper's (`query_id`, `output`, `default`), with the bare
//! `NaN` and `Infinity` tokens and `{"b64": ...}` strings both write.

use wirespeed_core::Tensor;

use super::values::{write_nested, write_row, write_string, Strings, Style};
use crate::Format;

/// How TF Serving writes the BYTES of `tensor`: base64 always when its
/// name ends in `_bytes`, as TF Serving's REST API does.
fn tf_strings(tensor: &Tensor) -> Style {
    Style::tf(if tensor.name.ends_with("_bytes") {
        Strings::Base64
    } else {
        Strings::Base64IfBinary
    })
}

/// Appends TF Serving's answer: `{"predictions": [...]}`, one element per
/// row, after a request in the row format; `{"outputs": ...}` after a
/// columnar one. With one output each value is that output's; with several,
/// an object by output name. BYTES that are not UTF-8 are `{"b64": ...}`,
/// and all of an output's are when its name ends in `_bytes`, as TF
/// Serving writes them.
pub fn encode_tf_response(outputs: &[Tensor], format: Format, out: &mut Vec<u8>) {
    let single = outputs.len() == 1;
    if format == Format::TfColumns {
        out.extend_from_slice(b"{\"outputs\":");
        if single {
            let t = &outputs[0];
            write_nested(out, &t.data, &t.shape, 0, tf_strings(t));
        } else {
            out.push(b'{');
            for (i, t) in outputs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, t.name.as_bytes());
                out.push(b':');
                write_nested(out, &t.data, &t.shape, 0, tf_strings(t));
            }
            out.push(b'}');
        }
        out.push(b'}');
        return;
    }
    let rows = outputs
        .iter()
        .map(|t| t.shape.first().copied().unwrap_or(1))
        .min()
        .unwrap_or(0);
    out.extend_from_slice(b"{\"predictions\":[");
    for row in 0..rows {
        if row > 0 {
            out.push(b',');
        }
        if single {
            write_row(out, &outputs[0], row, tf_strings(&outputs[0]));
            continue;
        }
        out.push(b'{');
        for (i, t) in outputs.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(out, t.name.as_bytes());
            out.push(b':');
            write_row(out, t, row, tf_strings(t));
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

/// Appends Clipper's answer from the model's first output: for one query
/// `{"query_id", "output", "default"}`, for a batch of several
/// `{"batch_predictions": [...]}` of those, with ids from `first_id` on. A
/// batch of one is answered as one query, as Clipper's query frontend does.
/// `default` is the explanation when the output is the model's default
/// (`"default": true, "default_explanation": ...`), as Clipper answers a
/// query past its latency objective.
pub fn encode_clipper_response(
    output: &Tensor,
    format: Format,
    first_id: u64,
    default: Option<&str>,
    out: &mut Vec<u8>,
) {
    let rows = output.shape.first().copied().unwrap_or(1);
    let mut ints = itoa::Buffer::new();
    let mut query = |out: &mut Vec<u8>, row: usize| {
        out.extend_from_slice(b"{\"query_id\":");
        out.extend_from_slice(ints.format(first_id + row as u64).as_bytes());
        out.extend_from_slice(b",\"output\":");
        write_row(out, output, row, Style::tf(Strings::Base64IfBinary));
        match default {
            None => out.extend_from_slice(b",\"default\":false}"),
            Some(explanation) => {
                out.extend_from_slice(b",\"default\":true,\"default_explanation\":");
                write_string(out, explanation.as_bytes());
                out.push(b'}');
            }
        }
    };
    if format == Format::ClipperBatch && rows != 1 {
        out.extend_from_slice(b"{\"batch_predictions\":[");
        for row in 0..rows {
            if row > 0 {
                out.push(b',');
            }
            query(out, row);
        }
        out.extend_from_slice(b"]}");
    } else {
        query(out, 0);
    }
}
