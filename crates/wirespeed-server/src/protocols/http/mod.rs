//! What every REST face shares: reading a body while it is decoded
//! (`body.rs`, on `wirespeed-http`'s reader, which also decompresses it),
//! the answers (`response.rs`), and a stream of responses as server-sent
//! events (`events.rs`).

pub(crate) mod body;
pub(crate) mod events;
pub(crate) mod response;
