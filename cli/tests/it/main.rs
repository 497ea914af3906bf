//! Integration tests of the built `manifestdb` binary: one test binary, a module per concern.

mod grain;
mod maintain;
mod readonly;
mod refusals;
mod support;
mod verbs;
mod walkthrough;
