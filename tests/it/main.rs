//! The integration tests: one binary, a module per concern.

mod accepted_model;
mod effects;
mod gates;
mod inputs;
mod publish;
mod readers;
mod retention;
mod scenario;
mod support;
