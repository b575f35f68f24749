//! The parts of a request message that are not its body: path variables
//! and query parameters, written as wire format after the body's bytes.
//! Protobuf reads concatenated messages as one (a later scalar wins,
//! messages merge), so `a.b.c=x` is `a { b { c: x } }` appended, and the
//! path's values win over the body's.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::encode::field_from_text;
use crate::error::TranscodeError;
use crate::routes::{resolve, BodyTarget, Found};
use crate::template::percent_decode;
use crate::wire;
use crate::wkt::wkt;
use crate::EncodeOptions;

/// The wire format of a found route's path variables and of the query
/// string's parameters, to append to the body's.
pub fn bound_fields(
    found: &Found<'_>,
    query: Option<&str>,
    options: EncodeOptions,
    ignore_unknown_query: bool,
) -> Result<Vec<u8>, TranscodeError> {
    let mut out = Vec::new();
    // Path variables and query values are text: an enum's name is checked
    // whatever `ignore_unknown_fields` says, an option for bodies.
    let options = EncodeOptions {
        ignore_unknown_fields: false,
        ..options
    };
    for (path, value) in &found.bindings {
        let value = value.as_deref().map_err(|lossy| {
            TranscodeError::invalid(
                0,
                format!(
                    "path variable '{}' is not UTF-8 once percent-decoded: '{lossy}'",
                    path.iter().map(|f| f.name()).collect::<Vec<_>>().join(".")
                ),
            )
        })?;
        // A repeated field's values, comma-separated, as grpc-gateway
        // reads them.
        let leaf = path.last().expect("a resolved path has a field");
        if leaf.is_list() {
            for one in value.split(',') {
                write_path(&mut out, path, one, options)?;
            }
        } else {
            write_path(&mut out, path, value, options)?;
        }
    }
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(out);
    };
    let input = found.route.method.input();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let not_text = |lossy: String| {
            TranscodeError::invalid(
                0,
                format!("query parameter '{lossy}' is not UTF-8 once percent-decoded"),
            )
        };
        let key = percent_decode(&key.replace('+', " "), false).map_err(not_text)?;
        let value = percent_decode(&value.replace('+', " "), false).map_err(|lossy| {
            TranscodeError::invalid(
                0,
                format!("query parameter '{key}': '{lossy}' is not UTF-8 once percent-decoded"),
            )
        })?;
        let names: Vec<String> = key.split('.').map(str::to_owned).collect();
        let path = match resolve(&input, &names, true) {
            Ok(path) => path,
            Err(_) if ignore_unknown_query => continue,
            Err(e) => {
                return Err(TranscodeError::invalid(
                    0,
                    format!("query parameter '{key}': {e}"),
                ))
            }
        };
        if found.route.body == BodyTarget::Whole {
            return Err(TranscodeError::invalid(
                0,
                format!(
                    "query parameter '{key}': this route's body carries every field of the request"
                ),
            ));
        }
        if let BodyTarget::Field(body) = &found.route.body {
            if path.starts_with(body) {
                return Err(TranscodeError::invalid(
                    0,
                    format!("query parameter '{key}': the body carries that field"),
                ));
            }
        }
        if found.bindings.iter().any(|(bound, _)| *bound == path) {
            return Err(TranscodeError::invalid(
                0,
                format!("query parameter '{key}': the path sets that field"),
            ));
        }
        let leaf = path.last().expect("a resolved path has a field");
        let text_form = match leaf.kind() {
            Kind::Message(m) => wkt(&m).takes_text(),
            _ => true,
        };
        if leaf.is_map() || !text_form {
            return Err(TranscodeError::invalid(
                0,
                format!("query parameter '{key}' names a message or map field, which a query cannot fill"),
            ));
        }
        write_path(&mut out, &path, &value, options).map_err(|e| {
            TranscodeError::invalid(0, format!("query parameter '{key}': {}", e.message()))
        })?;
    }
    Ok(out)
}

/// `value` as the field at the end of `path`, inside its parents.
fn write_path(
    out: &mut Vec<u8>,
    path: &[FieldDescriptor],
    value: &str,
    options: EncodeOptions,
) -> Result<(), TranscodeError> {
    let (leaf, parents) = path.split_last().expect("a resolved path has a field");
    let starts: Vec<usize> = parents
        .iter()
        .map(|p| wire::open(out, p.number()))
        .collect();
    // One element of a repeated field is written unpacked, which parsers
    // take for packed fields too; repeated parameters append.
    field_from_text(leaf, value, options, out)?;
    for start in starts.into_iter().rev() {
        wire::close(out, start);
    }
    Ok(())
}

/// The message a route's body is, for the body's encoder: the whole
/// request, or one field's value.
pub fn body_target(
    input: &MessageDescriptor,
    target: &BodyTarget,
) -> Option<(MessageDescriptor, Vec<FieldDescriptor>)> {
    match target {
        BodyTarget::None => None,
        BodyTarget::Whole => Some((input.clone(), Vec::new())),
        BodyTarget::Field(path) => Some((input.clone(), path.clone())),
    }
}
