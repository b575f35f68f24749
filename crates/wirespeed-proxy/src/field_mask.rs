//! grpc-gateway's PATCH feature: a `PATCH` whose body is one field of a
//! request that has an `update_mask` (`google.protobuf.FieldMask`) and
//! sends none gets the mask of the fields the body names.
//!
//! Clients of grpc-gateway's services rely on it (an update touches only
//! what was sent), so the proxy infers the mask the same way
//! (grpc-gateway's `runtime.FieldMaskFromRequestBody`): every key of the
//! body, nested into messages, stopping at lists, maps and `Any`s; inside
//! a `Struct` or `Value` every key is a path of its own; a key the message
//! lacks is an error. Paths are proto names, sorted.

use prost::Message;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value};

const FIELD_MASK: &str = "google.protobuf.FieldMask";

/// The request's `update_mask` field, when the route is one the feature
/// covers: a PATCH whose body is a field (not `*`) of a request holding a
/// `FieldMask` named `update_mask`.
pub(crate) fn mask_field(
    http_method: &str,
    input: &MessageDescriptor,
    body: &[FieldDescriptor],
) -> Option<FieldDescriptor> {
    if http_method != "PATCH" || body.is_empty() {
        return None;
    }
    let field = input.get_field_by_name("update_mask")?;
    match field.kind() {
        Kind::Message(m) if m.full_name() == FIELD_MASK && !field.is_list() => Some(field),
        _ => None,
    }
}

/// The paths `json` sets in `message` (the body field's type); an error
/// names a key the message does not have.
pub(crate) fn paths(message: &MessageDescriptor, json: &[u8]) -> Result<Vec<String>, String> {
    if json.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    let root: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    walk(Some(message), &root, "", &mut out)?;
    out.sort();
    Ok(out)
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

fn walk(
    message: Option<&MessageDescriptor>,
    node: &Value,
    path: &str,
    out: &mut Vec<String>,
) -> Result<(), String> {
    let object = match node {
        Value::Object(object) if !object.is_empty() => object,
        _ => {
            if !path.is_empty() {
                out.push(path.to_owned());
            }
            return Ok(());
        }
    };
    let Some(message) = message else {
        return Err("JSON structure did not match request type".to_owned());
    };
    for (key, value) in object {
        let field = message
            .get_field_by_name(key)
            .or_else(|| message.get_field_by_json_name(key))
            .ok_or_else(|| {
                format!(
                    "could not find field \"{key}\" in \"{}\"",
                    message.full_name()
                )
            })?;
        let child = join(path, field.name());
        let kind = field.kind();
        let inner = match &kind {
            Kind::Message(m) => Some(m),
            _ => None,
        };
        match inner.map(MessageDescriptor::full_name) {
            Some("google.protobuf.Struct" | "google.protobuf.Value") => {
                blindly(&child, value, out);
                continue;
            }
            Some("google.protobuf.Any") if !field.is_list() => {
                if !value.as_object().is_some_and(|o| o.contains_key("@type")) {
                    return Err(format!(
                        "could not find field @type in \"{key}\" in message \"{}\"",
                        message.full_name()
                    ));
                }
                out.push(child);
                continue;
            }
            _ => {}
        }
        if field.is_list() || field.is_map() {
            out.push(child);
        } else {
            walk(inner, value, &child, out)?;
        }
    }
    Ok(())
}

/// Inside a `Struct` or `Value`: every key down to a value that is not a
/// non-empty object.
fn blindly(path: &str, node: &Value, out: &mut Vec<String>) {
    match node {
        Value::Object(object) if !object.is_empty() => each(path, object, out),
        _ => out.push(path.to_owned()),
    }
}

fn each(path: &str, object: &Map<String, Value>, out: &mut Vec<String>) {
    for (key, value) in object {
        blindly(&join(path, key), value, out);
    }
}

/// The `update_mask` field holding `paths`, encoded, to append to the
/// request message.
pub(crate) fn encode(field: &FieldDescriptor, paths: Vec<String>) -> Vec<u8> {
    let mask = prost_types::FieldMask { paths };
    let inner = mask.encode_to_vec();
    let mut out = Vec::with_capacity(inner.len() + 8);
    prost::encoding::encode_key(
        field.number(),
        prost::encoding::WireType::LengthDelimited,
        &mut out,
    );
    prost::encoding::encode_varint(inner.len() as u64, &mut out);
    out.extend_from_slice(&inner);
    out
}
