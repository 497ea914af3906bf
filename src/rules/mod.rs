//! Pure rules: no redb, no clock, no file system.
//!
//! The seam between the rules and the storage layer: an operation (in `store/`) reads what a
//! rule needs inside one transaction, calls the rule with plain values (and its clock reading),
//! and writes what the rule decided in the same transaction. Nothing here reads or writes.
//!
//! Everything that decides (which names are acceptable, where an attempt stages, whether a
//! candidate is valid, which attempt is accepted, whether a run may publish and what the new
//! generation holds) lives here as functions over plain values. The store gathers the inputs
//! from its tables, calls a rule, and writes what the rule decided. A second storage layer
//! (for example PostgreSQL for multi-host schedulers) calls the same functions.

pub(crate) mod accept;
pub(crate) mod attempts;
pub(crate) mod cleanup;
pub(crate) mod declare;
pub(crate) mod delta;
pub(crate) mod digest;
pub(crate) mod effects;
pub(crate) mod ids;
pub(crate) mod publish;
pub(crate) mod retention;
pub(crate) mod staging;
pub(crate) mod validate;
pub(crate) mod views;
