//! The integration tests: one binary, a module per concern.

mod retention;
mod scenario;
mod support;
