//! The server library driven in process: a backend of the test's own
//! plugged into the registry, real sockets, tonic's gRPC client and plain
//! HTTP/1.1 over TCP.

mod batching;
mod front_ends;
mod layers;
mod scheduling;
mod support;
