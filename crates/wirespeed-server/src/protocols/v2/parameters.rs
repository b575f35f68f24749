//! A V2 request's parameters as Triton takes them from a client: keys
//! starting with `triton_` are Triton's own and refused (on gRPC, all but
//! `triton_enable_empty_final_response`, which perf_analyzer sends), in
//! Triton 2.51's words for each protocol; and the headers or metadata that
//! `--http-header-forward-pattern` / `--grpc-header-forward-pattern` match
//! are added as string parameters, which a Python model reads with
//! `request.parameters()`.

use regex::Regex;
use wirespeed_core::{Error, ParameterValue, Parameters};

/// Which request headers become an inference request's parameters, as
/// Triton's `--http-header-forward-pattern` and
/// `--grpc-header-forward-pattern` choose them: a header whose name the
/// protocol's regular expression matches (anywhere in the name, letters of
/// either case, as Triton's RE2 `PartialMatch` with `(?i)`) is a string
/// parameter of that name, in place of a parameter of the body of the same
/// name. None forwarded when unset.
#[derive(Debug, Clone, Default)]
pub struct HeaderForward {
    /// For V2 REST requests' headers.
    pub http: Option<regex::Regex>,
    /// For V2 gRPC calls' metadata (a stream's, for each of its requests).
    pub grpc: Option<regex::Regex>,
}

impl HeaderForward {
    /// The patterns as Triton's flags give them.
    pub fn new(http: Option<&str>, grpc: Option<&str>) -> Result<HeaderForward, regex::Error> {
        let compile = |pattern: &str| regex::Regex::new(&format!("(?i){pattern}"));
        Ok(HeaderForward {
            http: http.map(compile).transpose()?,
            grpc: grpc.map(compile).transpose()?,
        })
    }
}

/// The one `triton_` key a gRPC request may set.
const EMPTY_FINAL_RESPONSE: &str = "triton_enable_empty_final_response";

/// Refuses a REST request that sets a key starting with `triton_`.
pub(crate) fn refuse_reserved_rest(parameters: &Parameters) -> Result<(), Error> {
    if parameters.iter().any(|(key, _)| key.starts_with("triton_")) {
        return Err(Error::invalid_input(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should \
             not be specified.",
        ));
    }
    Ok(())
}

/// Refuses a gRPC request that sets a key starting with `triton_`, but
/// the one Triton allows.
pub(crate) fn refuse_reserved_grpc<'a>(
    mut keys: impl Iterator<Item = &'a String>,
) -> Result<(), Error> {
    if keys.any(|key| key.starts_with("triton_") && key != EMPTY_FINAL_RESPONSE) {
        return Err(Error::invalid_input(format!(
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the \
             following keys starting with 'triton_' are allowed: {EMPTY_FINAL_RESPONSE}"
        )));
    }
    Ok(())
}

/// Adds each of `headers` (name, value) whose name `pattern` matches to
/// `parameters`, as a string parameter in place of one of its name. A
/// value that is not text is left out.
pub(crate) fn forward<'a>(
    pattern: Option<&Regex>,
    parameters: &mut Parameters,
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
) {
    let Some(pattern) = pattern else {
        return;
    };
    for (name, value) in headers {
        if !pattern.is_match(name) {
            continue;
        }
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        let value = ParameterValue::String(value.to_owned());
        match parameters.iter_mut().find(|(key, _)| key == name) {
            Some(kept) => kept.1 = value,
            None => parameters.push((name.to_owned(), value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_empty_final_response_key_passes_on_grpc() {
        let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(refuse_reserved_grpc(keys(&[EMPTY_FINAL_RESPONSE, "tritonish"]).iter()).is_ok());
        let e = refuse_reserved_grpc(keys(&["triton_x"]).iter()).unwrap_err();
        assert!(e.message().ends_with(EMPTY_FINAL_RESPONSE), "{e}");
        let rest = vec![(EMPTY_FINAL_RESPONSE.to_owned(), ParameterValue::Bool(true))];
        assert!(refuse_reserved_rest(&rest).is_err());
        let upper = vec![("TRITON_x".to_owned(), ParameterValue::Int(1))];
        assert!(refuse_reserved_rest(&upper).is_ok());
    }

    #[test]
    fn matching_headers_replace_parameters_of_their_name() {
        let pattern = Regex::new("(?i)tenant|^trace").unwrap();
        let mut parameters = vec![("tenant".to_owned(), ParameterValue::Int(1))];
        let headers: [(&str, &[u8]); 4] = [
            ("tenant", b"acme"),
            ("x-tenant-id", b"7"),
            ("my-trace", b"no"),
            ("traceparent", b"\xff"),
        ];
        forward(Some(&pattern), &mut parameters, headers.into_iter());
        assert_eq!(
            parameters,
            vec![
                ("tenant".to_owned(), ParameterValue::String("acme".into())),
                ("x-tenant-id".to_owned(), ParameterValue::String("7".into())),
            ]
        );
    }
}
