//! placeholder
mod number;
mod string;
