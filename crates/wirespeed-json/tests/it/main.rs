//! Integration tests of the push decoder: differential property tests,
//! hostile inputs with their error categories and offsets, and the binary
//! tensor data extension's JSON header.

mod binary;
mod differential;
mod hostile;
