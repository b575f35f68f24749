//! What every REST face shares: reading a body while it is decoded
//! (`body.rs`), compression both ways (`compression.rs`), and the answers
//! (`response.rs`).

pub(crate) mod body;
pub(crate) mod compression;
pub(crate) mod response;
