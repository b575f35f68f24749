//! The scheduler's tests, without a server or a socket: a gated model in a
//! scheduler, driven by tasks that stand for its callers.

mod admission;
mod batching;
mod queue;
mod support;
