//! The integration tests: one binary, a module per concern.

mod group_commit;
mod scenario;
mod support;
