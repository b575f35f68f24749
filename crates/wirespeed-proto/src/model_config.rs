//! Triton's model configuration (`inference.ModelConfig`) beyond its prost
//! message: its descriptor, for reading a `config.pbtxt`'s text format, and
//! its JSON as Triton writes it (the `/config` endpoint, a Python model's
//! `args["model_config"]`).

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use wirespeed_core::DataType;

use crate::inference as pb;

/// The descriptor of `inference.ModelConfig`.
pub fn descriptor() -> Result<MessageDescriptor, String> {
    let pool = DescriptorPool::decode(crate::FILE_DESCRIPTOR_SET)
        .map_err(|e| format!("the model configuration's descriptor: {e}"))?;
    pool.get_message_by_name("inference.ModelConfig")
        .ok_or_else(|| "the model configuration's descriptor is missing".to_owned())
}

/// Triton's JSON of a model configuration, as its Python backend gives it
/// to `initialize` in `args["model_config"]` (and its `/config` endpoint
/// serves it): proto field names, every field, enums by name, and 64-bit
/// integers as numbers.
pub fn to_json(config: &pb::ModelConfig) -> String {
    let Ok(descriptor) = descriptor() else {
        return "{}".into();
    };
    let mut message = DynamicMessage::new(descriptor);
    if message.transcode_from(config).is_err() {
        return "{}".into();
    }
    let options = SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .use_proto_field_name(true)
        .skip_default_fields(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| "{}".into())
}

/// Triton's data type of `datatype`: `TYPE_` and the V2 name, BYTES as
/// `TYPE_STRING`.
pub fn data_type(datatype: DataType) -> pb::DataType {
    if datatype == DataType::Bytes {
        return pb::DataType::TypeString;
    }
    pb::DataType::from_str_name(&format!("TYPE_{}", datatype.as_str()))
        .unwrap_or(pb::DataType::TypeInvalid)
}
