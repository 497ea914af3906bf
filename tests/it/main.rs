//! The integration tests: one binary, a module per concern.

mod crash;
mod scenario;
mod support;
mod verify;
