//! manifestdb makes retried work publish exactly once.
//!
//! Schedulers run tasks at least once: a worker can write its output and die before its
//! completion is acknowledged, and the retry leaves two attempts behind. manifestdb is the
//! commit layer that makes that harmless:
//!
//! - every attempt writes into its own private staging directory ([`Store::begin_attempt`]);
//! - a finished attempt is a *candidate* ([`Store::finish_attempt`]) until the coordinator
//!   validates it ([`Store::validate_attempt`]) against its run's pinned snapshot and its task's
//!   expected rows and total;
//! - per task the lowest-numbered valid attempt is *accepted*, kept in a keyed index;
//! - [`Store::publish`] checks completeness, the gates and determinism, then writes the next
//!   generation of the dataset (the previous one with exactly the run's partitions replaced)
//!   and moves the dataset's generation pointer, all in one redb write transaction;
//! - readers ([`Snapshot`], also from other processes through [`ReadOnlyStore`]) see the last
//!   complete generation, never a candidate and never a mix;
//! - side effects are recorded under a natural key ([`Store::record_effect`]) and become ready
//!   to emit in the transaction that publishes their run; of several emitters, the one holding
//!   a claim ([`Store::claim_effect`]) emits it and marks it emitted.
//! - retention bounds what retries leave behind: attempts past their lease are fenced
//!   ([`Store::abandon_expired_attempts`]), old generations expire
//!   ([`Store::expire_generations`]), a retained one can be made current again
//!   ([`Store::rollback`]), and staging files nobody can need are deleted by a persisted plan
//!   that is re-checked path by path when applied ([`Store::plan_cleanup`],
//!   [`Store::apply_cleanup`]); every destructive call defaults to a dry run.
//! - engines that list directories read a published **view** ([`StoreOptions::views`]):
//!   after every publish and rollback, `<views>/<dataset>/current` names a plain directory tree
//!   of the current generation (hard links to the accepted files, and a `_manifest.json`,
//!   [`ViewManifest`]), moved by one atomic rename and never naming an incomplete view
//!   ([`Store::sync_view`]).
//!
//! ```
//! use manifestdb::{
//!     Candidate, DataFormat, FileCheck, Grain, PublishOptions, PublishOutcome, RunSpec, Store, TaskKey, TaskSpec, describe_file,
//! };
//!
//! # fn main() -> Result<(), manifestdb::Error> {
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().join("store.redb"), dir.path().join("staging"))?;
//! store.declare_run(&RunSpec {
//!     dataset: "daily_units".into(),
//!     run: "2026-11-29".into(),
//!     snapshot: "sales@v42".into(),
//!     tasks: vec![TaskSpec { partition: "date=2026-11-29/region=eu".into(), expected_rows: 2, expected_total: Some(700) }],
//!     // One row per (store, item); validation reads the rows and computes the figures.
//!     grain: Some(Grain::new(DataFormat::Csv, &["store", "item"], "units")),
//!     trust_reported_figures: false,
//! })?;
//! let task = TaskKey::new("daily_units", "2026-11-29", "date=2026-11-29/region=eu");
//! let ticket = store.begin_attempt(&task)?;
//! std::fs::write(ticket.staging_dir.join("part.csv"), "store,item,units\n1,7,300\n2,7,400\n").unwrap();
//! let candidate = Candidate {
//!     snapshot: "sales@v42".into(),
//!     rows: Some(2), // with a grain: an optional cross-check, as are total and digest
//!     total: None,
//!     digest: None,
//!     files: vec![describe_file(&ticket.staging_dir, "part.csv")?],
//! };
//! store.finish_attempt(&ticket.key, &candidate)?;
//! assert!(store.validate_attempt(&ticket.key, FileCheck::SizeAndChecksum)?.is_valid());
//! let figures = store.snapshot()?.attempt(&ticket.key)?.and_then(|a| a.reconciliation).unwrap();
//! assert_eq!((figures.computed_rows, figures.computed_total, figures.duplicate_keys), (Some(2), Some(700), 0));
//! let PublishOutcome::Published(generation) = store.publish("daily_units", "2026-11-29", &PublishOptions::default())? else {
//!     panic!("refused");
//! };
//! assert_eq!(generation.number, 1);
//! let manifest = store.snapshot()?.manifest("daily_units", None)?.unwrap();
//! assert_eq!(manifest.partitions[0].attempt, 1);
//! assert!(manifest.partitions[0].digest.starts_with("ms256:2:")); // the store's canonical digest
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod batch;
mod codec;
#[cfg(feature = "delta")]
mod delta;
pub mod documents;
mod error;
mod grain;
mod lifecycle;
mod meta;
mod model;
#[cfg(feature = "s3")]
mod objects;
mod ops;
#[cfg(feature = "postgres")]
mod pg;
mod progress;
mod readers;
mod records;
mod rules;
mod schema;
#[cfg(feature = "server")]
pub mod server;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod verify;
mod views;

pub use batch::{BATCH_OPS_MAX, BatchOp, BatchOutcome, validation_after_its_finish};
pub use error::{Corruption, Error, ErrorKind, Result, StorageError, StorageErrorKind};
pub use grain::{DataFormat, Grain, ReconcileBasis, Reconciliation};
pub use lifecycle::{
    ApplyOptions, ApplyReport, AttemptLease, CleanupOptions, CleanupPlan, CleanupReason, ExpireReport, KeepReason, PlannedPath,
    RetentionPolicy, RollbackOutcome, RollbackRefusal, RunMode, SkipReason, SkippedPath,
};
pub use model::{
    AbandonOutcome, AttemptInfo, AttemptKey, AttemptStatus, AttemptTicket, Candidate, ClaimOutcome, DeclareOutcome, Effect, EffectClaim,
    EffectKey, EffectStatus, FileCheck, FileEntry, FinishOutcome, GateFailure, Generation, GenerationKind, InvalidateOutcome, Manifest,
    ManifestDiff, MarkOutcome, NondeterminismOverride, PartitionEntry, PublishOptions, PublishOutcome, PublishRefusal, RecordedEffect,
    RefusalReason, RunInfo, RunSpec, RunSummary, TaskKey, TaskRefusal, TaskSpec, Verdict,
};
pub use progress::{Progress, ProgressStage};
pub use rules::digest::{RowDigest, parse_measure};
pub use store::{
    ATTEMPT_LIFETIME_MAX, CleanupApply, DEFAULT_ATTEMPT_LIFETIME, EFFECT_CLAIM_LEASE_MAX, PreparedValidation, ReadOnlyStore,
    STAGING_ROOT_MARKER, Snapshot, Store, StoreOptions, describe_file, file_crc32, list_staged_files,
};
pub use verify::{Finding, IntegrityCheck, VerifyOptions, VerifyReport};
pub use views::{FileList, ViewFileEntry, ViewManifest, ViewMode, ViewOptions, ViewPartition, ViewPath, ViewStatus, ViewTotals, ViewTrees};

/// The README's example and the Rust blocks of the book's chapters, compiled and run by
/// `cargo test --doc` exactly as printed (the book hides the lines starting with `# `). Doctests
/// rather than `mdbook test`: they build against this crate with its dev-dependencies, which
/// `mdbook test` cannot link in a workspace.
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/src/library.md")]
    struct LibraryChapter;
    #[doc = include_str!("../docs/src/retention.md")]
    struct RetentionChapter;
    #[doc = include_str!("../docs/src/postgres.md")]
    struct PostgresChapter;
}
