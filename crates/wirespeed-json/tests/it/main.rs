//! Integration tests of the push decoder: differential property tests, and
//! hostile inputs with their error categories and offsets.

mod differential;
mod hostile;
