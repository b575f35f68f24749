//! placeholder
mod number;
