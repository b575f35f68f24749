//! What each of the tokenizer's events does to the encoder: a key picks
//! the field (or map key, or `Any`'s `@type`); an object or array opens a
//! frame; an end closes one and the record it reserved.

use prost_reflect::Kind;

use super::*;
use crate::error::TranscodeError;
use crate::wire::{self};

impl Encoder {
    /// A key in the innermost object.
    pub(super) fn on_key(&mut self, key: &[u8], at: u64) -> Result<(), TranscodeError> {
        let ignore = self.options.ignore_unknown_fields;
        let out = &mut self.out;
        match self.stack.last_mut() {
            Some(Frame::Message {
                desc,
                seen,
                oneofs,
                pending,
                any,
                ..
            }) => {
                let name =
                    std::str::from_utf8(key).map_err(|_| invalid(at, "a key that is not UTF-8"))?;
                match any {
                    Some(AnyPhase::AwaitType) => {
                        if name != "@type" {
                            return Err(invalid(at, format!(
                                "an Any gives '@type' first (its type decides how the rest is read); got '{name}'"
                            )));
                        }
                        *pending = Pending::AnyType;
                        return Ok(());
                    }
                    Some(AnyPhase::AwaitValue(value_desc)) => {
                        if name != "value" {
                            return Err(invalid(
                                at,
                                format!(
                                    "an Any holding {} has only 'value', got '{name}'",
                                    value_desc.full_name()
                                ),
                            ));
                        }
                        *pending = Pending::AnyValue(value_desc.clone());
                        *any = Some(AnyPhase::Body);
                        return Ok(());
                    }
                    _ => {}
                }
                let field = desc
                    .get_field_by_json_name(name)
                    .or_else(|| desc.get_field_by_name(name));
                let Some(field) = field else {
                    if ignore {
                        *pending = Pending::Skip;
                        return Ok(());
                    }
                    let names: Vec<String> = desc
                        .fields()
                        .map(|f| f.json_name().to_owned())
                        .take(24)
                        .collect();
                    return Err(invalid(
                        at,
                        format!(
                            "message {} has no field '{name}'; its fields are {}",
                            desc.full_name(),
                            names.join(", ")
                        ),
                    ));
                };
                if seen.contains(&field.number()) {
                    return Err(invalid(
                        at,
                        format!("field '{}' is given twice", field.name()),
                    ));
                }
                seen.push(field.number());
                if let Some(oneof) = field.containing_oneof().filter(|o| !o.is_synthetic()) {
                    if oneofs.iter().any(|o| o == oneof.name()) {
                        return Err(invalid(
                            at,
                            format!(
                                "oneof '{}' already has a field; '{}' is another of its fields",
                                oneof.name(),
                                field.name()
                            ),
                        ));
                    }
                    oneofs.push(oneof.name().to_owned());
                }
                *pending = Pending::Field(field);
            }
            Some(Frame::Map { field, entry, keys }) => {
                if !keys.insert(key.to_vec()) {
                    return Err(invalid(
                        at,
                        format!(
                            "map '{}' has key '{}' twice",
                            field.name(),
                            String::from_utf8_lossy(key)
                        ),
                    ));
                }
                let Kind::Message(entry_desc) = field.kind() else {
                    return Err(invalid(at, "a map field without an entry message"));
                };
                *entry = Some(wire::open(out, field.number()));
                let key_field = entry_desc.map_entry_key_field();
                write_map_key(out, &key_field, key)
                    .map_err(|e| invalid(at, format!("map '{}': {e}", field.name())))?;
            }
            Some(Frame::Struct { entry, keys, .. }) => {
                if !keys.insert(key.to_vec()) {
                    return Err(invalid(
                        at,
                        format!("key '{}' is given twice", String::from_utf8_lossy(key)),
                    ));
                }
                *entry = Some(wire::open(out, 1));
                wire::bytes_field(out, 1, key);
            }
            Some(Frame::Skip { .. }) => {}
            Some(Frame::List { .. } | Frame::ListValue { .. }) | None => {
                return Err(invalid(at, "a key outside an object"));
            }
        }
        Ok(())
    }

    pub(super) fn on_begin_object(&mut self, at: u64) -> Result<(), TranscodeError> {
        match self.dest(at)? {
            Dest::Skip => self.skip_open(),
            Dest::AnyType => return Err(invalid(at, "an Any's '@type' must be a string")),
            Dest::Field(f) => {
                if f.is_map() {
                    self.stack.push(Frame::Map {
                        field: f,
                        entry: None,
                        keys: HashSet::new(),
                    });
                } else if f.is_list() {
                    return Err(invalid(
                        at,
                        format!("field '{}' takes a list, got an object", f.name()),
                    ));
                } else {
                    match f.kind() {
                        Kind::Message(desc) => self.open_message(desc, Some(f.number()), at)?,
                        _ => {
                            return Err(invalid(
                                at,
                                format!(
                                    "field '{}' takes {}, got an object",
                                    f.name(),
                                    kind_form(&f.kind())
                                ),
                            ))
                        }
                    }
                }
            }
            Dest::Element(f) | Dest::MapValue(f) => {
                let number = if matches!(self.stack.last(), Some(Frame::Map { .. })) {
                    2
                } else {
                    f.number()
                };
                match f.kind() {
                    Kind::Message(desc) => self.open_message(desc, Some(number), at)?,
                    _ => {
                        return Err(invalid(
                            at,
                            format!(
                                "'{}' takes {}, got an object",
                                f.name(),
                                kind_form(&f.kind())
                            ),
                        ))
                    }
                }
            }
            Dest::Value(n) => {
                let closes = vec![wire::open(&mut self.out, n), wire::open(&mut self.out, 5)];
                self.stack.push(Frame::Struct {
                    closes,
                    entry: None,
                    keys: HashSet::new(),
                });
            }
            Dest::InPlace(desc) => self.open_message(desc, None, at)?,
        }
        Ok(())
    }

    pub(super) fn on_begin_array(&mut self, at: u64) -> Result<(), TranscodeError> {
        match self.dest(at)? {
            Dest::Skip => self.skip_open(),
            Dest::AnyType => return Err(invalid(at, "an Any's '@type' must be a string")),
            Dest::Field(f) => {
                if f.is_list() {
                    let packed = if f.is_packed() {
                        let tag_at = self.out.len();
                        Some((wire::open(&mut self.out, f.number()), tag_at))
                    } else {
                        None
                    };
                    let kind = f.kind();
                    let fast = packed.and_then(|_| Packed::of(&kind));
                    let strings = (kind == Kind::String).then(|| f.number());
                    self.stack.push(Frame::List {
                        field: f,
                        packed,
                        fast,
                        strings,
                    });
                } else if let Kind::Message(desc) = f.kind() {
                    self.open_message_list(&desc, Some(f.number()), at)?;
                } else {
                    let want = if f.is_map() {
                        "an object".to_owned()
                    } else {
                        kind_form(&f.kind())
                    };
                    return Err(invalid(
                        at,
                        format!("field '{}' takes {want}, got a list", f.name()),
                    ));
                }
            }
            Dest::Element(f) | Dest::MapValue(f) => {
                let number = if matches!(self.stack.last(), Some(Frame::Map { .. })) {
                    2
                } else {
                    f.number()
                };
                match f.kind() {
                    Kind::Message(desc) => self.open_message_list(&desc, Some(number), at)?,
                    _ => {
                        return Err(invalid(
                            at,
                            format!("'{}' takes {}, got a list", f.name(), kind_form(&f.kind())),
                        ))
                    }
                }
            }
            Dest::Value(n) => {
                let closes = vec![wire::open(&mut self.out, n), wire::open(&mut self.out, 6)];
                self.stack.push(Frame::ListValue { closes });
            }
            Dest::InPlace(desc) => self.open_message_list(&desc, None, at)?,
        }
        Ok(())
    }

    pub(super) fn skip_open(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Skip { depth }) => *depth += 1,
            _ => self.stack.push(Frame::Skip { depth: 1 }),
        }
    }

    /// The innermost object or array ends.
    pub(super) fn on_end(&mut self, at: u64) -> Result<(), TranscodeError> {
        if let Some(Frame::Skip { depth }) = self.stack.last_mut() {
            *depth -= 1;
            if *depth > 0 {
                return Ok(());
            }
        }
        match self.stack.pop() {
            Some(Frame::Message { closes, any, .. }) => {
                // An Any with no '@type' is the empty Any.
                if let Some(AnyPhase::AwaitValue(v)) = any {
                    return Err(invalid(
                        at,
                        format!("an Any holding {} needs its 'value'", v.full_name()),
                    ));
                }
                for start in closes.into_iter().rev() {
                    wire::close(&mut self.out, start);
                }
            }
            Some(Frame::List { packed, .. }) => {
                if let Some((start, tag_at)) = packed {
                    if self.out.len() == start {
                        self.out.truncate(tag_at);
                    } else {
                        wire::close(&mut self.out, start);
                    }
                }
            }
            Some(Frame::Struct { closes, .. } | Frame::ListValue { closes }) => {
                for start in closes.into_iter().rev() {
                    wire::close(&mut self.out, start);
                }
            }
            Some(Frame::Map { .. } | Frame::Skip { .. }) => {}
            None => return Err(invalid(at, "a closing bracket with nothing open")),
        }
        self.check_size(at)?;
        self.value_done()
    }
}
