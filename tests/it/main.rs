//! The integration tests: one binary, a module per concern.

mod accepted_model;
mod backend;
mod batch;
mod crash;
mod damage;
mod duckdb;
mod durability;
mod effects;
mod fixtures;
mod fuzz_regressions;
mod gates;
mod grain;
mod group_commit;
mod hostile;
mod inputs;
mod io_errors;
mod kill;
mod publish;
mod readers;
mod retention;
mod rule_holes;
mod scenario;
mod server;
mod support;
mod verify;
mod views;
