//! Integration tests of the push decoder: differential property tests,
//! hostile inputs with their error categories and offsets, and the binary
//! tensor data extension's JSON header, and the TF Serving and Clipper
//! request formats.

mod binary;
mod differential;
mod hostile;
mod response;
mod rows;
