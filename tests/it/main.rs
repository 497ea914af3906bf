//! The integration tests: one binary, a module per concern.

mod crash;
mod io_errors;
mod scenario;
mod support;
mod verify;
