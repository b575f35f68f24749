//! `NaN`, `Infinity` and `-Infinity` in a `:classify` or `:regress` body.
//!
//! TF Serving's REST API takes these tokens (Python's `json.dumps` writes
//! them) and `:predict` reads them with wirespeed's own decoder. The
//! examples are read with serde_json, which has no option for them, so a
//! body that holds one is respelled first: each token outside a string
//! becomes a one-key object, `{"\u0000non-finite":"NaN"}`, that the
//! feature reader takes for the float (a letter outside a string is
//! otherwise only `true`, `false` or `null`, so nothing else is touched).
//! A body without them is read as it is, uncopied. The objects are longer
//! than the tokens, so an error's column is mapped back to the body the
//! client sent.

/// The key of the object a token becomes (as serde reads it).
pub(super) const KEY: &str = "\u{0}non-finite";

/// The tokens, and the JSON each becomes.
const TOKENS: [(&[u8], &[u8]); 3] = [
    (b"NaN", br#"{"\u0000non-finite":"NaN"}"#),
    (b"Infinity", br#"{"\u0000non-finite":"Infinity"}"#),
    (b"-Infinity", br#"{"\u0000non-finite":"-Infinity"}"#),
];

/// The value of a respelled token, by the string its object holds.
pub(super) fn value(spelled: &str) -> Option<f64> {
    match spelled {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// A body with its tokens respelled, and where they were.
pub(super) struct Respelled {
    pub(super) body: Vec<u8>,
    /// Each replacement: its offset in `body`, and how many bytes longer
    /// it is than the token.
    grown: Vec<(usize, usize)>,
}

/// `body` with its non-finite tokens respelled, or `None` when it has
/// none.
pub(super) fn respell(body: &[u8]) -> Option<Respelled> {
    let mut out: Option<Respelled> = None;
    let mut copied = 0;
    let mut in_string = false;
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        let found = matches!(b, b'N' | b'I' | b'-')
            .then(|| {
                TOKENS
                    .iter()
                    .find(|(token, _)| body[i..].starts_with(token))
            })
            .flatten();
        let Some((token, spelled)) = found else {
            i += 1;
            continue;
        };
        let respelled = out.get_or_insert_with(|| Respelled {
            body: Vec::with_capacity(body.len() + 64),
            grown: Vec::new(),
        });
        respelled.body.extend_from_slice(&body[copied..i]);
        respelled
            .grown
            .push((respelled.body.len(), spelled.len() - token.len()));
        respelled.body.extend_from_slice(spelled);
        i += token.len();
        copied = i;
    }
    if let Some(respelled) = out.as_mut() {
        respelled.body.extend_from_slice(&body[copied..]);
    }
    out
}

impl Respelled {
    /// serde_json's message for an error in the respelled body, with its
    /// column as it is in the body the client sent.
    pub(super) fn message(&self, error: &serde_json::Error) -> String {
        let text = error.to_string();
        let (line, column) = (error.line(), error.column());
        let suffix = format!(" at line {line} column {column}");
        let Some(message) = text.strip_suffix(&suffix) else {
            return text;
        };
        // The line's start in the respelled body; lines are not changed.
        let start = self
            .body
            .split(|&b| b == b'\n')
            .take(line.saturating_sub(1))
            .map(|l| l.len() + 1)
            .sum::<usize>();
        let at = start + column.saturating_sub(1);
        let grown: usize = self
            .grown
            .iter()
            .filter(|&&(offset, _)| offset >= start && offset < at)
            .map(|&(_, grown)| grown)
            .sum();
        format!(
            "{message} at line {line} column {}",
            column.saturating_sub(grown)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_outside_strings_are_respelled_and_strings_kept() {
        let body = br#"{"examples":[{"x":[NaN,1,-Infinity,Infinity],"s":"NaN \" Infinity"}]}"#;
        let respelled = respell(body).unwrap();
        let text = String::from_utf8(respelled.body.clone()).unwrap();
        assert_eq!(
            text,
            r#"{"examples":[{"x":[{"\u0000non-finite":"NaN"},1,{"\u0000non-finite":"-Infinity"},{"\u0000non-finite":"Infinity"}],"s":"NaN \" Infinity"}]}"#
        );
        assert!(respell(br#"{"s":"NaN","n":-1}"#).is_none());
    }

    #[test]
    fn an_error_is_placed_in_the_body_as_sent() {
        let body = b"{\"x\": [NaN, Infinity, 1.]}";
        let respelled = respell(body).unwrap();
        let error = serde_json::from_slice::<serde_json::Value>(&respelled.body).unwrap_err();
        let column = body.iter().position(|&b| b == b']').unwrap() + 1;
        assert!(
            respelled
                .message(&error)
                .ends_with(&format!("line 1 column {column}")),
            "{}",
            respelled.message(&error)
        );
    }
}
