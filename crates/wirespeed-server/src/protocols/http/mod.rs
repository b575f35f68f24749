//! What every REST face shares: reading a body while it is decoded
//! (`body.rs`, on `wirespeed-http`'s reader, which also decompresses it),
//! and the answers (`response.rs`).

pub(crate) mod body;
pub(crate) mod response;
