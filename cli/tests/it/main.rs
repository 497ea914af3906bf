//! Integration tests of the built `manifestdb` binary: one test binary, a module per concern.

mod batch;
mod book;
mod concurrent;
mod damage;
mod grain;
mod maintain;
mod messages;
mod objects;
mod operator;
mod progress;
mod readonly;
mod refusals;
mod remote;
mod serve;
mod support;
mod syncs;
mod verbs;
mod views;
mod walkthrough;
