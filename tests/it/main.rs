//! The integration tests: one binary, a module per concern.

mod scenario;
mod support;
