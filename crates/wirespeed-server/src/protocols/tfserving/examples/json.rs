//! The JSON body of `:classify` and `:regress`, read by serde's streaming
//! deserializer straight into the columns: no JSON tree is built.

use std::fmt;

use base64::Engine;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use wirespeed_core::DataType;
use wirespeed_proto::tensorflow as tf;

use super::columns::{Examples, Values};
use super::non_finite;

/// Where a feature was given, for messages.
#[derive(Debug, Clone, Copy)]
pub(super) enum Place {
    Context,
    Example(usize),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Context => f.write_str("context"),
            Place::Example(row) => write!(f, "example {row}"),
        }
    }
}

/// The request object.
pub(super) struct BodySeed<'e, 'a>(pub(super) &'e mut Examples<'a>);

impl<'de> DeserializeSeed<'de> for BodySeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BodySeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with 'examples' (and optionally 'signature_name' and 'context')")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let examples = self.0;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "signature_name" => examples.signature = map.next_value()?,
                "context" => map.next_value_seed(FeaturesSeed {
                    examples: &mut *examples,
                    place: Place::Context,
                })?,
                "examples" => {
                    if examples.listed {
                        return Err(de::Error::custom("'examples' is given twice"));
                    }
                    examples.listed = true;
                    map.next_value_seed(ListSeed(&mut *examples))?;
                }
                // TF Serving reads only its keys.
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        examples.charge_context().map_err(de::Error::custom)
    }
}

/// `examples`: a list of feature objects.
pub(super) struct ListSeed<'e, 'a>(&'e mut Examples<'a>);

impl<'de> DeserializeSeed<'de> for ListSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'examples' as a list of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let examples = self.0;
        loop {
            let row = examples.rows;
            examples.start_example().map_err(de::Error::custom)?;
            let seed = FeaturesSeed {
                examples: &mut *examples,
                place: Place::Example(row),
            };
            if seq.next_element_seed(seed)?.is_none() {
                // The row started for an element that was not there.
                for column in &mut examples.columns {
                    let keep = column.values.len() - column.width;
                    match &mut column.values {
                        Values::Float(v) => v.truncate(keep),
                        Values::Int(v) => v.truncate(keep),
                        Values::Bool(v) => v.truncate(keep),
                        Values::Bytes(v) => v.truncate(keep),
                    }
                    column.given.pop();
                }
                examples.rows -= 1;
                return Ok(());
            }
        }
    }
}

/// One example (or the context): feature name to value or list.
pub(super) struct FeaturesSeed<'e, 'a> {
    pub(super) examples: &'e mut Examples<'a>,
    pub(super) place: Place,
}

impl<'de> DeserializeSeed<'de> for FeaturesSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FeaturesSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} as an object of features", self.place)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<String>()? {
            let index = self
                .examples
                .column_of(&name, self.place)
                .map_err(de::Error::custom)?;
            let column = &self.examples.columns[index];
            let mut feature = FeatureState {
                place: self.place,
                name: &name,
                datatype: column.spec.datatype,
                values: Values::empty_like(column.spec.datatype),
                nested: false,
            };
            map.next_value_seed(FeatureSeed(&mut feature))?;
            let values = feature.values;
            let bytes = match &values {
                Values::Bytes(v) => v.iter().map(Vec::len).sum(),
                _ => 0,
            };
            self.examples.charge(0, bytes).map_err(de::Error::custom)?;
            self.examples
                .store(self.place, index, values)
                .map_err(de::Error::custom)?;
        }
        Ok(())
    }
}

/// One feature being read: a value or a flat list of values of the
/// input's kind.
pub(super) struct FeatureState<'n> {
    pub(super) place: Place,
    pub(super) name: &'n str,
    pub(super) datatype: DataType,
    pub(super) values: Values,
    /// Inside the feature's list: a list here is an error.
    pub(super) nested: bool,
}

impl FeatureState<'_> {
    pub(super) fn wrong(&self, got: &str) -> String {
        format!(
            "{}: feature '{}' feeds a {} input, got {got}",
            self.place, self.name, self.datatype
        )
    }

    pub(super) fn number(&mut self, x: Number) -> Result<(), String> {
        match (&mut self.values, x) {
            (Values::Float(v), Number::Float(f)) => v.push(f),
            (Values::Float(v), Number::Int(i)) => v.push(i as f64),
            (Values::Int(v), Number::Int(i)) => v.push(i),
            (Values::Int(v), Number::Float(f))
                if f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64 =>
            {
                v.push(f as i64)
            }
            (Values::Bool(v), Number::Int(i @ (0 | 1))) => v.push(i == 1),
            (Values::Int(_), Number::Float(_)) => return Err(self.wrong("a fraction")),
            (Values::Bool(_), _) => return Err(self.wrong("a number other than 0 or 1")),
            (Values::Bytes(_), _) => return Err(self.wrong("a number")),
        }
        Ok(())
    }

    pub(super) fn string(&mut self, s: Vec<u8>) -> Result<(), String> {
        match &mut self.values {
            Values::Bytes(v) => {
                v.push(s);
                Ok(())
            }
            _ => Err(self.wrong("a string")),
        }
    }

    pub(super) fn boolean(&mut self, b: bool) -> Result<(), String> {
        match &mut self.values {
            Values::Bool(v) => v.push(b),
            // TF Serving keeps booleans as int64 1 and 0.
            Values::Int(v) => v.push(b as i64),
            Values::Float(v) => v.push(b as u8 as f64),
            Values::Bytes(_) => return Err(self.wrong("a boolean")),
        }
        Ok(())
    }

    /// A protobuf `Feature`'s list, under the same rules as JSON values.
    pub(super) fn feature(&mut self, feature: tf::Feature) -> Result<(), String> {
        use tf::feature::Kind;
        match feature.kind {
            Some(Kind::BytesList(list)) => list
                .value
                .into_iter()
                .try_for_each(|b| self.string(b.to_vec())),
            Some(Kind::FloatList(list)) => list
                .value
                .into_iter()
                .try_for_each(|f| self.number(Number::Float(f64::from(f)))),
            Some(Kind::Int64List(list)) => list
                .value
                .into_iter()
                .try_for_each(|i| self.number(Number::Int(i))),
            None => Ok(()),
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum Number {
    Int(i64),
    Float(f64),
}

/// Reads a feature's value (or each of its list's) into its state.
pub(super) struct FeatureSeed<'s, 'n>(&'s mut FeatureState<'n>);

impl<'de> DeserializeSeed<'de> for FeatureSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FeatureSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "feature '{}' as a value or a list of values",
            self.0.name
        )
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        self.0.boolean(b).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        self.0.number(Number::Int(i)).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        let state = self.0;
        match i64::try_from(u) {
            Ok(i) => state.number(Number::Int(i)),
            Err(_) if matches!(state.values, Values::Float(_)) => {
                state.number(Number::Float(u as f64))
            }
            // TF Serving: "Only int64_t is supported".
            Err(_) => Err(state.wrong("an integer past int64's range")),
        }
        .map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        self.0.number(Number::Float(f)).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.string(s.as_bytes().to_vec()).map_err(E::custom)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(self.0.wrong("null")))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let state = self.0;
        if state.nested {
            return Err(de::Error::custom(state.wrong("a nested list")));
        }
        state.nested = true;
        while seq.next_element_seed(FeatureSeed(&mut *state))?.is_some() {}
        Ok(())
    }

    /// `{"b64": "..."}`: binary bytes; or a respelled `NaN` or
    /// `Infinity` (`non_finite.rs`).
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let state = self.0;
        let encoded = match map.next_key::<String>()?.as_deref() {
            Some("b64") => map.next_value::<String>()?,
            Some(non_finite::KEY) => {
                let spelled = map.next_value::<String>()?;
                let x = non_finite::value(&spelled).ok_or_else(|| {
                    de::Error::custom(state.wrong("an object other than {\"b64\": ...}"))
                })?;
                return match state.values {
                    Values::Float(_) => state.number(Number::Float(x)),
                    _ => Err(state.wrong(&spelled)),
                }
                .map_err(de::Error::custom);
            }
            _ => {
                let e = state.wrong("an object other than {\"b64\": ...}");
                return Err(de::Error::custom(e));
            }
        };
        if map.next_key::<IgnoredAny>()?.is_some() {
            let e = state.wrong("an object other than {\"b64\": ...}");
            return Err(de::Error::custom(e));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| {
                de::Error::custom(format!(
                    "{}: feature '{}' has invalid base64: {e}",
                    state.place, state.name
                ))
            })?;
        state.string(bytes).map_err(de::Error::custom)
    }
}
