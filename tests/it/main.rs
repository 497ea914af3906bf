//! The integration tests: one binary, a module per concern.

mod crash;
mod fixtures;
mod fuzz_regressions;
mod io_errors;
mod kill;
mod scenario;
mod support;
mod verify;
