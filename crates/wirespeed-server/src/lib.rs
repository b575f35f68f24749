//! placeholder
pub mod codec;
