//! Test support shared by the integration tests and the fuzz targets (cargo feature `testing`).
//!
//! [`FaultyBackend`] is a redb [`StorageBackend`] held in memory that models what a disk keeps
//! through a power loss, in the manner of redb's own `tests/crash_consistency.rs`:
//!
//! - the *live* image is what the process sees: every `write` and `set_len` lands there at once;
//! - the *durable* image is what survives a power loss: a successful `sync_data` copies the live
//!   image to it, and the writes since the last sync are kept as a list of *pending* operations;
//! - [`FaultyBackend::crash_image`] builds the image left by a power loss now, according to a
//!   [`Tear`]: every pending write lost, the last one torn, all of them kept, or a seeded subset;
//! - [`FaultyBackend::power_loss_at`] arms a power loss at the k-th mutating operation
//!   (`write`, `set_len` or `sync_data`, counted from 1): that operation and every later one
//!   fail, and nothing reaches the durable image any more;
//! - [`FaultyBackend::fail_nth`] fails the n-th operation of a kind with an I/O error, once or
//!   from then on, and [`FaultyBackend::set_capacity_bytes`] makes writes beyond a size fail
//!   with `StorageFull` (ENOSPC) until lifted.
//!
//! A failed `sync_data` leaves the durable image as it was (the pessimistic reading of fsync
//! failures: the data may or may not be on disk, so a caller must not trust it). The store
//! poisons its handle on such a failure, so nothing later depends on a retried sync.
//!
//! Locking is real: the lock methods are forwarded to redb's own [`FileBackend`] over a small
//! lock file of the backend's own (byte-range OFD locks, as on a store file), so a store on this
//! backend opens in the concurrency mode [`Store::open`] ships (`SingleWriter`, two-phase
//! commit), and [`FaultyBackend::another_process`] gives a second handle on the same images whose
//! locks are another owner's, as a reader in another process has.
//!
//! [`FileBackend`]: redb::backends::FileBackend
//!
//! [`decode_any_record`] feeds raw bytes to the private codec as every record type, for the
//! `decode_record` fuzz target.

use std::fmt;
use std::io;
use std::sync::Arc;

use std::ops::Bound;

use parking_lot::Mutex;
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The kinds of storage operation a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `StorageBackend::write`.
    Write,
    /// `StorageBackend::set_len`.
    SetLen,
    /// `StorageBackend::sync_data`.
    Sync,
    /// Any of the three.
    Any,
}

impl OpKind {
    fn matches(self, op: OpKind) -> bool {
        self == OpKind::Any || self == op
    }
}

/// Whether an injected failure happens once or for every matching operation from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// Only the n-th matching operation fails.
    Once,
    /// The n-th matching operation and every later one fail.
    FromThenOn,
}

/// What survives a power loss of the writes made since the last successful sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// Nothing unsynced survives: the durable image as it stands.
    LoseUnsynced,
    /// Every pending operation but the last write survives; of the last write only its first
    /// half (at least one byte, at most all but one) reaches the disk. With a single pending
    /// write this is the classic torn write.
    TornLastWrite,
    /// Every pending operation survives (the power failed after the writes reached the disk,
    /// before the sync returned).
    KeepUnsynced,
    /// Each pending operation survives or not as the seed decides; a surviving write may be
    /// torn at a seeded length.
    Subset {
        /// Seeds the choice.
        seed: u64,
    },
}

impl Tear {
    /// The three deterministic modes, for exhaustive sweeps.
    pub const DETERMINISTIC: [Tear; 3] = [Tear::LoseUnsynced, Tear::TornLastWrite, Tear::KeepUnsynced];
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

#[derive(Debug, Clone)]
struct Injection {
    kind: OpKind,
    /// Matching operations still to let through before failing.
    remaining: u64,
    mode: FailMode,
    error: io::ErrorKind,
    /// Set once the injection has fired.
    fired: bool,
}

#[derive(Default)]
struct State {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// Mutating operations seen (write, set_len, sync_data), including failed ones.
    ops: u64,
    writes: u64,
    set_lens: u64,
    syncs: u64,
    /// The mutating operation number at which power is lost.
    power_loss_at: Option<u64>,
    powered_off: bool,
    injections: Vec<Injection>,
    injected_failures: u64,
    capacity_bytes: Option<u64>,
}

/// An in-memory redb storage backend that can fail operations and lose power. Cloning gives
/// another handle on the same state (and the same lock owner), so a test keeps one clone to
/// control the backend while the store owns the other.
#[derive(Clone)]
pub struct FaultyBackend {
    state: Arc<Mutex<State>>,
    locks: Arc<LockFile>,
}

/// The file whose byte-range locks stand for the store's: one open file description per lock
/// owner (a process, in production).
struct LockFile {
    /// Kept so that [`FaultyBackend::another_process`] can open it again; removed on drop.
    path: Arc<tempfile::TempPath>,
    backend: FileBackend,
}

impl LockFile {
    fn create() -> LockFile {
        // Test support: a machine that cannot create a temporary file cannot run the tests.
        let file = tempfile::NamedTempFile::new().expect("creating the fault backend's lock file");
        let path = Arc::new(file.into_temp_path());
        LockFile::open(path)
    }

    fn open(path: Arc<tempfile::TempPath>) -> LockFile {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&*path).expect("opening the fault backend's lock file");
        let backend = FileBackend::new(file).expect("a lock file backend");
        LockFile { path, backend }
    }
}

impl Default for FaultyBackend {
    fn default() -> Self {
        FaultyBackend { state: Arc::default(), locks: Arc::new(LockFile::create()) }
    }
}

impl fmt::Debug for FaultyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("FaultyBackend")
            .field("live_bytes", &state.live.len())
            .field("durable_bytes", &state.durable.len())
            .field("pending", &state.pending.len())
            .field("ops", &state.ops)
            .field("powered_off", &state.powered_off)
            .finish()
    }
}

fn powered_off_error() -> io::Error {
    io::Error::other("simulated power loss: the device is gone")
}

/// A tiny deterministic generator (SplitMix64) so that a seed fully decides a subset tear.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn apply_pending(image: &mut Vec<u8>, op: &Pending, keep_bytes: Option<usize>) {
    match op {
        Pending::SetLen(len) => image.resize(*len, 0),
        Pending::Write { offset, data } => {
            let data = &data[..keep_bytes.unwrap_or(data.len()).min(data.len())];
            let end = offset + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset..end].copy_from_slice(data);
        }
    }
}

impl FaultyBackend {
    /// An empty backend (redb creates a new database on it).
    pub fn new() -> FaultyBackend {
        FaultyBackend::default()
    }

    /// A backend whose live and durable images are `image`, as after a reboot.
    pub fn from_image(image: Vec<u8>) -> FaultyBackend {
        let state = State { live: image.clone(), durable: image, ..State::default() };
        FaultyBackend { state: Arc::new(Mutex::new(state)), locks: Arc::new(LockFile::create()) }
    }

    /// Another handle on the same images whose locks belong to another owner, as the handle of
    /// another process on the same file: a [`crate::ReadOnlyStore`] opened on it shares the
    /// store with a live writer as a reader process does. Its operations are counted and fail
    /// with this backend's.
    pub fn another_process(&self) -> FaultyBackend {
        FaultyBackend { state: Arc::clone(&self.state), locks: Arc::new(LockFile::open(Arc::clone(&self.locks.path))) }
    }

    /// Loses power at the `k`-th mutating operation (counted from 1 over the backend's life):
    /// that operation and every later one fail and nothing more becomes durable.
    pub fn power_loss_at(&self, k: u64) {
        self.state.lock().power_loss_at = Some(k);
    }

    /// Loses power now.
    pub fn power_loss_now(&self) {
        self.state.lock().powered_off = true;
    }

    /// True once the power is lost.
    pub fn powered_off(&self) -> bool {
        self.state.lock().powered_off
    }

    /// Fails the `n`-th (from 1) operation of `kind` counted from this call, with an I/O error
    /// of `error`'s kind, once or from then on.
    pub fn fail_nth(&self, kind: OpKind, n: u64, mode: FailMode, error: io::ErrorKind) {
        let injection = Injection { kind, remaining: n.saturating_sub(1), mode, error, fired: false };
        self.state.lock().injections.push(injection);
    }

    /// Removes every armed failure.
    pub fn clear_failures(&self) {
        self.state.lock().injections.clear();
    }

    /// How many operations failed by injection (not counting power loss or a full device).
    pub fn injected_failures(&self) -> u64 {
        self.state.lock().injected_failures
    }

    /// Makes the device hold at most `capacity` bytes: a `write` or `set_len` that would grow
    /// the image beyond it fails with `StorageFull` (ENOSPC). `None` lifts the limit.
    pub fn set_capacity_bytes(&self, capacity: Option<u64>) {
        self.state.lock().capacity_bytes = capacity;
    }

    /// Mutating operations so far (writes, set_lens, syncs, including failed ones).
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// `(writes, set_lens, syncs)` so far.
    pub fn op_counts(&self) -> (u64, u64, u64) {
        let state = self.state.lock();
        (state.writes, state.set_lens, state.syncs)
    }

    /// Number of operations not yet made durable by a sync.
    pub fn pending_ops(&self) -> usize {
        self.state.lock().pending.len()
    }

    /// What the process sees now (as after a restart without power loss).
    pub fn live_image(&self) -> Vec<u8> {
        self.state.lock().live.clone()
    }

    /// What survives a power loss now, according to `tear`.
    pub fn crash_image(&self, tear: Tear) -> Vec<u8> {
        let state = self.state.lock();
        let mut image = state.durable.clone();
        match tear {
            Tear::LoseUnsynced => {}
            Tear::KeepUnsynced => {
                for op in &state.pending {
                    apply_pending(&mut image, op, None);
                }
            }
            Tear::TornLastWrite => {
                let last_write = state.pending.iter().rposition(|op| matches!(op, Pending::Write { .. }));
                for (i, op) in state.pending.iter().enumerate() {
                    if Some(i) == last_write {
                        if let Pending::Write { data, .. } = op {
                            let keep = (data.len() / 2).max(1).min(data.len().saturating_sub(1));
                            apply_pending(&mut image, op, Some(keep));
                        }
                    } else {
                        apply_pending(&mut image, op, None);
                    }
                }
            }
            Tear::Subset { seed } => {
                let mut rng = seed;
                for op in &state.pending {
                    let roll = splitmix(&mut rng);
                    if roll & 1 == 0 {
                        continue;
                    }
                    let keep = match op {
                        // One surviving write in four is torn at a seeded length.
                        Pending::Write { data, .. } if roll & 6 == 0 && !data.is_empty() => {
                            Some(usize::try_from(splitmix(&mut rng) % data.len() as u64).unwrap_or(0))
                        }
                        _ => None,
                    };
                    apply_pending(&mut image, op, keep);
                }
            }
        }
        image
    }

    /// Counts one mutating operation and decides whether it fails.
    fn admit(&self, state: &mut State, op: OpKind) -> Result<(), io::Error> {
        state.ops += 1;
        match op {
            OpKind::Write => state.writes += 1,
            OpKind::SetLen => state.set_lens += 1,
            OpKind::Sync => state.syncs += 1,
            OpKind::Any => {}
        }
        if state.power_loss_at.is_some_and(|k| state.ops >= k) {
            state.powered_off = true;
        }
        if state.powered_off {
            return Err(powered_off_error());
        }
        let mut failure = None;
        for injection in &mut state.injections {
            if !injection.kind.matches(op) {
                continue;
            }
            if injection.fired {
                if injection.mode == FailMode::FromThenOn {
                    failure = Some(injection.error);
                }
            } else if injection.remaining == 0 {
                injection.fired = true;
                failure = Some(injection.error);
            } else {
                injection.remaining -= 1;
            }
        }
        match failure {
            Some(kind) => {
                state.injected_failures += 1;
                let what = if kind == io::ErrorKind::StorageFull { "no space left on device".to_owned() } else { kind.to_string() };
                Err(io::Error::new(kind, format!("injected {op:?} failure: {what}")))
            }
            None => Ok(()),
        }
    }
}

fn full_error() -> io::Error {
    io::Error::new(io::ErrorKind::StorageFull, "injected: no space left on device")
}

fn to_usize(value: u64) -> Result<usize, io::Error> {
    usize::try_from(value).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset does not fit in memory"))
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> Result<u64, io::Error> {
        Ok(self.state.lock().live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let state = self.state.lock();
        let start = to_usize(offset)?;
        let end = start.checked_add(out.len()).filter(|end| *end <= state.live.len());
        match end {
            Some(end) => {
                out.copy_from_slice(&state.live[start..end]);
                Ok(())
            }
            None => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
        }
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let mut state = self.state.lock();
        self.admit(&mut state, OpKind::SetLen)?;
        if state.capacity_bytes.is_some_and(|cap| len > cap && len > state.live.len() as u64) {
            return Err(full_error());
        }
        let len = to_usize(len)?;
        state.live.resize(len, 0);
        state.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let mut state = self.state.lock();
        self.admit(&mut state, OpKind::Sync)?;
        state.durable = state.live.clone();
        state.pending.clear();
        Ok(())
    }

    fn close(&self) -> Result<(), io::Error> {
        self.locks.backend.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.locks.backend.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.locks.backend.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.locks.backend.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.locks.backend.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.locks.backend.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.locks.backend.query_lock_range(start, end)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        let mut state = self.state.lock();
        self.admit(&mut state, OpKind::Write)?;
        let start = to_usize(offset)?;
        let end = start.checked_add(data.len()).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past the end"))?;
        if state.capacity_bytes.is_some_and(|cap| end as u64 > cap && end > state.live.len()) {
            return Err(full_error());
        }
        if state.live.len() < end {
            state.live.resize(end, 0);
        }
        state.live[start..end].copy_from_slice(data);
        state.pending.push(Pending::Write { offset: start, data: data.to_vec() });
        Ok(())
    }
}

/// The key the sample records of [`encode_sample_records`] are framed under, and that
/// [`decode_any_record`] decodes under.
pub const SAMPLE_KEY: &[u8] = b"fuzz";

/// One sync the store made of staging data, a new store file or a directory, as reported to
/// [`observe_syncs`] just before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncEvent {
    /// The file or directory.
    pub path: std::path::PathBuf,
    /// True for a directory (`fsync` of its entries), false for a file (`fdatasync`).
    pub directory: bool,
}

type SyncObserver = std::rc::Rc<dyn Fn(&SyncEvent) -> io::Result<()>>;

thread_local! {
    static SYNC_OBSERVER: std::cell::RefCell<Option<SyncObserver>> = const { std::cell::RefCell::new(None) };
}

/// Runs `body` with `observer` told of every sync the store makes on this thread (of staging
/// files and directories, of a new store file and its directory), before the sync runs. An
/// `Err` from the observer fails that sync with it, as the operating system's error would (the
/// real sync is then not made). Observers nest; the previous one is restored afterwards, also
/// on panic.
///
/// The store makes these syncs on the calling thread, outside write transactions: validation
/// (the candidate's files and the directories on their way that this handle has not made
/// durable yet), cleanup (directories it removed entries from) and store creation.
pub fn observe_syncs<R>(observer: impl Fn(&SyncEvent) -> io::Result<()> + 'static, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<SyncObserver>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            SYNC_OBSERVER.with(|cell| *cell.borrow_mut() = previous);
        }
    }
    let previous = SYNC_OBSERVER.with(|cell| cell.borrow_mut().replace(std::rc::Rc::new(observer)));
    let _restore = Restore(previous);
    body()
}

/// Called by the store's sync seam (`store::files::sync_handle`) before each sync.
pub(crate) fn before_sync(path: &Path, directory: bool) -> io::Result<()> {
    let observer = SYNC_OBSERVER.with(|cell| cell.borrow().clone());
    match observer {
        Some(observer) => observer(&SyncEvent { path: path.to_path_buf(), directory }),
        None => Ok(()),
    }
}

/// Decodes `bytes` as a value of every table (through the codec and each record's own check)
/// and returns, per table, whether it decoded. Never panics, whatever the bytes.
pub fn decode_any_record(bytes: &[u8]) -> Vec<(&'static str, crate::Result<()>)> {
    decode_any_record_under(SAMPLE_KEY, bytes)
}

/// As [`decode_any_record`], for a value stored under `key`.
pub fn decode_any_record_under(key: &[u8], bytes: &[u8]) -> Vec<(&'static str, crate::Result<()>)> {
    use crate::records::{
        AcceptedRecord, AttemptRecord, DigestRecord, EffectRecord, GenerationRecord, MetaRecord, PartitionVersionRecord, PointerRecord,
        RunRecord, TaskRecord,
    };
    use crate::schema::{ACCEPTED, ATTEMPTS, DIGESTS, EFFECTS, GENERATIONS, META, POINTERS, RUNS, TASKS, VERSIONS};
    fn d<R: crate::records::Checked>(def: crate::schema::Def, key: &[u8], bytes: &[u8]) -> crate::Result<()> {
        crate::records::decode::<R>(def.name, key, bytes).map(drop)
    }
    vec![
        (META.name, d::<MetaRecord>(META, key, bytes)),
        (RUNS.name, d::<RunRecord>(RUNS, key, bytes)),
        (TASKS.name, d::<TaskRecord>(TASKS, key, bytes)),
        (ATTEMPTS.name, d::<AttemptRecord>(ATTEMPTS, key, bytes)),
        (ACCEPTED.name, d::<AcceptedRecord>(ACCEPTED, key, bytes)),
        (VERSIONS.name, d::<PartitionVersionRecord>(VERSIONS, key, bytes)),
        (GENERATIONS.name, d::<GenerationRecord>(GENERATIONS, key, bytes)),
        (POINTERS.name, d::<PointerRecord>(POINTERS, key, bytes)),
        (DIGESTS.name, d::<DigestRecord>(DIGESTS, key, bytes)),
        (EFFECTS.name, d::<EffectRecord>(EFFECTS, key, bytes)),
    ]
}

/// A few valid framed records of several tables, as the store writes them under
/// [`SAMPLE_KEY`], so that the decode fuzzer and its seed corpus start from real frames.
pub fn encode_sample_records() -> Vec<Vec<u8>> {
    use crate::records::Checked;
    fn encode<R: Checked>(record: &R) -> Vec<u8> {
        crate::codec::encode(R::TABLE.name, SAMPLE_KEY, record)
    }
    let s = samples();
    vec![encode(&s.0), encode(&s.1), encode(&s.2), encode(&s.3), encode(&s.4)]
}

type Samples = (
    crate::records::RunRecord,
    crate::records::AttemptRecord,
    crate::records::PartitionVersionRecord,
    crate::records::GenerationRecord,
    crate::records::EffectRecord,
);

fn samples() -> Samples {
    use crate::records::{AttemptRecord, EffectRecord, GenerationRecord, PartitionEntryRecord, PartitionVersionRecord, RunRecord};
    (
        RunRecord {
            snapshot: "sales@1".into(),
            task_count: 2,
            declared_at_ms: 1,
            published_generation: Some(3),
            grain: Some(crate::Grain::new(crate::DataFormat::Csv, &["store", "item"], "units")),
        },
        AttemptRecord {
            started_at_ms: 1,
            heartbeat_at_ms: 2,
            abandoned_at_ms: None,
            staging_rel: "ds/r/p/@attempt-1".into(),
            candidate: Some(crate::Candidate {
                snapshot: "s".into(),
                rows: Some(2),
                total: Some(-4),
                digest: Some("d".into()),
                files: vec![crate::FileEntry { path: "part.csv".into(), size_bytes: 10, crc32: 7 }],
            }),
            verdict: Some(crate::Verdict::Invalid(vec![
                crate::GateFailure::RowsMismatch { expected: 1, got: 2 },
                crate::GateFailure::DuplicateGrainKey { duplicates: 1, key: vec!["1".into(), "7".into()] },
            ])),
            reconciliation: Some(crate::Reconciliation {
                basis: crate::ReconcileBasis::Read { format: crate::DataFormat::Csv },
                expected_rows: 1,
                expected_total: Some(-4),
                reported_rows: Some(2),
                reported_total: Some(-4),
                reported_digest: Some("d".into()),
                computed_rows: Some(2),
                computed_total: Some(-4),
                duplicate_keys: 1,
                rejected_rows: 0,
                computed_digest: Some("ms256:2:00".into()),
                files_read: 1,
                bytes_read: 10,
            }),
        },
        PartitionVersionRecord {
            entry: Some(PartitionEntryRecord {
                run: "r".into(),
                attempt: 1,
                snapshot: "s".into(),
                rows: 1,
                total: None,
                digest: "d".into(),
                staging_rel: "x".into(),
                files: vec![],
            }),
        },
        GenerationRecord {
            parent: 1,
            run: "r".into(),
            snapshot: "s".into(),
            published_at_ms: 5,
            partitions_replaced: 1,
            nondeterminism_accepted: None,
            kind: crate::GenerationKind::Rollback { restored: 1, actor: "a".into(), reason: "b".into() },
        },
        EffectRecord {
            payload: vec![1, 2, 3],
            recorded_at_ms: 9,
            status: crate::EffectStatus::Ready { generation: 2 },
            claim: Some(crate::EffectClaim { claimant: "w1".into(), claimed_at_ms: 10, expires_at_ms: 20 }),
        },
    )
}

/// The codec's contract, checked on one fuzz input (the `decode_record` target):
///
/// 1. the input read as a stored value of every table either fails as [`Error::Corrupted`] or
///    decodes to a record that re-encodes and decodes to itself, and that, framed for one key
///    and table, fails its checksum under any other key or table;
/// 2. a sample record's frame (picked by the first byte) damaged as the rest says (3 bytes per
///    change: offset u16 little-endian modulo the frame length, then a nonzero xor mask, or a
///    cut of the frame when the mask is 0) decodes to the same record or fails as
///    [`Error::Corrupted`].
///
/// Never panics itself; a panic inside the codec is what the fuzzer looks for.
///
/// # Errors
/// A message naming the broken part of the contract.
pub fn decode_contract_check(data: &[u8]) -> Result<(), String> {
    use crate::records::{
        AcceptedRecord, AttemptRecord, DigestRecord, EffectRecord, GenerationRecord, MetaRecord, PartitionVersionRecord, PointerRecord,
        RunRecord, TaskRecord,
    };
    raw::<MetaRecord>(data)?;
    raw::<RunRecord>(data)?;
    raw::<TaskRecord>(data)?;
    raw::<AttemptRecord>(data)?;
    raw::<AcceptedRecord>(data)?;
    raw::<PartitionVersionRecord>(data)?;
    raw::<GenerationRecord>(data)?;
    raw::<PointerRecord>(data)?;
    raw::<DigestRecord>(data)?;
    raw::<EffectRecord>(data)?;
    let Some((&pick, changes)) = data.split_first() else { return Ok(()) };
    let s = samples();
    match pick % 5 {
        0 => mutated(&s.0, changes),
        1 => mutated(&s.1, changes),
        2 => mutated(&s.2, changes),
        3 => mutated(&s.3, changes),
        _ => mutated(&s.4, changes),
    }
}

fn is_corrupted<T>(result: &crate::Result<T>) -> bool {
    matches!(result, Err(Error::Corrupted { .. }))
}

fn raw<R: crate::records::Checked + PartialEq + fmt::Debug>(data: &[u8]) -> Result<(), String> {
    use crate::codec::{decode, encode};
    let table = R::TABLE.name;
    let decoded = decode::<R>(table, SAMPLE_KEY, data);
    let record = match decoded {
        Ok(record) => record,
        Err(Error::Corrupted { .. }) => return Ok(()),
        Err(other) => return Err(format!("{table}: decoding failed with a non-corruption error: {other}")),
    };
    let frame = encode(table, SAMPLE_KEY, &record);
    match decode::<R>(table, SAMPLE_KEY, &frame) {
        Ok(again) if again == record => {}
        other => return Err(format!("{table}: {record:?} re-encoded decodes as {other:?}")),
    }
    let other_key = [SAMPLE_KEY, b"\0"].concat();
    let other_table = if table == crate::schema::RUNS.name { crate::schema::TASKS.name } else { crate::schema::RUNS.name };
    if !is_corrupted(&decode::<R>(table, &other_key, &frame)) || !is_corrupted(&decode::<R>(other_table, SAMPLE_KEY, &frame)) {
        return Err(format!("{table}: a frame decodes under another key or table"));
    }
    Ok(())
}

fn mutated<R: crate::records::Checked + PartialEq + fmt::Debug>(record: &R, changes: &[u8]) -> Result<(), String> {
    use crate::codec::{decode, encode};
    let table = R::TABLE.name;
    let mut frame = encode(table, SAMPLE_KEY, record);
    for change in changes.chunks(3) {
        if frame.is_empty() {
            break;
        }
        let byte = |i: usize| change.get(i).copied().unwrap_or(0);
        let at = usize::from(u16::from_le_bytes([byte(0), byte(1)])) % frame.len();
        match byte(2) {
            0 => frame.truncate(at),
            mask => frame[at] ^= mask,
        }
    }
    match decode::<R>(table, SAMPLE_KEY, &frame) {
        Ok(decoded) if decoded == *record => Ok(()),
        Ok(decoded) => Err(format!("{table}: a damaged frame decoded as another record: {decoded:?}")),
        Err(Error::Corrupted { .. }) => Ok(()),
        Err(other) => Err(format!("{table}: a damaged frame failed with a non-corruption error: {other}")),
    }
}

// ---------------------------------------------------------------------------------------------
// A scripted workload over a small fixed universe, its observable state, and the crash harness
// shared by `tests/it/crash.rs` and the `crash_recovery` fuzz target.
// ---------------------------------------------------------------------------------------------

use std::path::Path;

use crate::{
    Candidate, EffectKey, EffectStatus, Error, FileCheck, PublishOptions, PublishOutcome, RunSpec, Snapshot, Store, StoreOptions, TaskKey,
    TaskSpec, VerifyOptions,
};

/// The dataset every workload op writes.
pub const DATASET: &str = "daily_units";

/// Number of runs in the universe.
pub const RUNS: u8 = 4;

/// Number of partitions in the universe.
pub const PARTITIONS: u8 = 4;

/// One store operation of a workload, over the fixed universe of [`RUNS`] runs and
/// [`PARTITIONS`] partitions of [`DATASET`] (indexes are taken modulo those counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Declare run `run` with its partitions (see [`run_partitions`]).
    Declare {
        /// Run index.
        run: u8,
    },
    /// Begin the next attempt of a task.
    Begin {
        /// Run index.
        run: u8,
        /// Partition index.
        part: u8,
    },
    /// Write the attempt's file into its staging directory and finish it; `good: false` writes
    /// one row too many, so validation finds it invalid.
    Finish {
        /// Run index.
        run: u8,
        /// Partition index.
        part: u8,
        /// Attempt number.
        attempt: u32,
        /// Whether the output matches the task's expectations.
        good: bool,
    },
    /// Write the attempt's file, finish and validate it in one call
    /// ([`Store::finish_and_validate`], sizes only); `good` as for [`Op::Finish`].
    FinishValidate {
        /// Run index.
        run: u8,
        /// Partition index.
        part: u8,
        /// Attempt number.
        attempt: u32,
        /// Whether the output matches the task's expectations.
        good: bool,
    },
    /// Validate an attempt (sizes only).
    Validate {
        /// Run index.
        run: u8,
        /// Partition index.
        part: u8,
        /// Attempt number.
        attempt: u32,
    },
    /// Record side effect `name` of the run (run-level if `part` is `None`).
    Effect {
        /// Run index.
        run: u8,
        /// Partition index, or run-level.
        part: Option<u8>,
        /// Effect name index.
        name: u8,
    },
    /// Publish the run.
    Publish {
        /// Run index.
        run: u8,
    },
    /// Mark a side effect emitted.
    Emit {
        /// Run index.
        run: u8,
        /// Partition index, or run-level.
        part: Option<u8>,
        /// Effect name index.
        name: u8,
    },
    /// Read the whole observable state (must succeed).
    Read,
    /// Roll the dataset back to generation `to` (a new generation with its content).
    Rollback {
        /// The generation to restore.
        to: u8,
    },
    /// Expire generations beyond the `keep_last` newest (no time window).
    Expire {
        /// Generations to keep.
        keep_last: u8,
    },
    /// Plan a cleanup of every dead file (age threshold zero, forced).
    PlanCleanup,
    /// Apply the newest stored cleanup plan for real (as a client does with the plan its last
    /// plan call returned: after a crash that call may have been retried, so the newest one).
    ApplyCleanup,
}

/// The id of run `run`.
pub fn run_id(run: u8) -> String {
    format!("run-{}", run % RUNS)
}

/// The key of partition `part`.
pub fn partition_key(part: u8) -> String {
    format!("date=2026-11-{:02}/region=eu", 20 + part % PARTITIONS)
}

/// The partitions run `run` declares: run 0 all but the last, run 1 two of them (one new), run
/// 2 every partition, run 3 one.
pub fn run_partitions(run: u8) -> Vec<u8> {
    match run % RUNS {
        0 => (0..PARTITIONS - 1).collect(),
        1 => vec![1, PARTITIONS - 1],
        2 => (0..PARTITIONS).collect(),
        _ => vec![2],
    }
}

fn expected(run: u8, part: u8) -> (u64, i64) {
    let (run, part) = (run % RUNS, part % PARTITIONS);
    (3 + u64::from(run) + u64::from(part), 100 * (i64::from(run) + 1) + i64::from(part))
}

fn task_key(run: u8, part: u8) -> TaskKey {
    TaskKey::new(DATASET, run_id(run), partition_key(part))
}

fn effect_key(run: u8, part: Option<u8>, name: u8) -> EffectKey {
    EffectKey { dataset: DATASET.into(), run: run_id(run), effect: format!("notify-{}", name % 2), partition: part.map(partition_key) }
}

/// The spec of run `run`.
pub fn run_spec(run: u8) -> RunSpec {
    RunSpec {
        dataset: DATASET.into(),
        run: run_id(run),
        snapshot: format!("sales@{}", run % RUNS),
        tasks: run_partitions(run)
            .into_iter()
            .map(|part| {
                let (rows, total) = expected(run, part);
                TaskSpec { partition: partition_key(part), expected_rows: rows, expected_total: Some(total) }
            })
            .collect(),
        grain: None,
        trust_reported_figures: true,
    }
}

/// Applies one op to the store and returns a short, deterministic summary of its outcome.
///
/// # Errors
/// Whatever the store returns (refusals of ops that do not apply, or storage failures).
pub fn apply(store: &Store, op: Op) -> crate::Result<String> {
    match op {
        Op::Declare { run } => store.declare_run(&run_spec(run)).map(|o| format!("{o:?}")),
        Op::Begin { run, part } => store.begin_attempt(&task_key(run, part)).map(|t| format!("attempt {}", t.key.attempt)),
        Op::Finish { run, part, attempt, good } => {
            let (key, candidate) = worker_output(store, run, part, attempt, good)?;
            store.finish_attempt(&key, &candidate).map(|o| format!("{o:?}"))
        }
        Op::FinishValidate { run, part, attempt, good } => {
            let (key, candidate) = worker_output(store, run, part, attempt, good)?;
            store.finish_and_validate(&key, &candidate, FileCheck::Size).map(|v| format!("{}", v.is_valid()))
        }
        Op::Validate { run, part, attempt } => {
            store.validate_attempt(&task_key(run, part).attempt(attempt), FileCheck::Size).map(|v| format!("{}", v.is_valid()))
        }
        Op::Effect { run, part, name } => store
            .record_effect(&effect_key(run, part, name), format!("payload {run} {part:?} {name}").as_bytes())
            .map(|r| format!("new={}", r.newly_recorded)),
        Op::Publish { run } => store.publish(DATASET, &run_id(run), &PublishOptions::default()).map(|o| match o {
            PublishOutcome::Published(g) => format!("published {}", g.number),
            PublishOutcome::AlreadyPublished(g) => format!("already {}", g.number),
            PublishOutcome::Refused(r) => format!("refused {} tasks", r.tasks.len()),
        }),
        Op::Emit { run, part, name } => {
            store.mark_effect_emitted(&effect_key(run, part, name), None).map(|o| format!("{:?}", normalize(&o.effect().status)))
        }
        Op::Read => dump(&store.snapshot()?).map(|lines| format!("{} lines", lines.len())),
        Op::Rollback { to } => store.rollback(DATASET, u64::from(to), "operator", "crash test").map(|o| match o {
            crate::RollbackOutcome::RolledBack(g) => format!("rolled back as {}", g.number),
            crate::RollbackOutcome::Refused(r) => format!("refused {r:?}"),
        }),
        Op::Expire { keep_last } => {
            let policy = crate::RetentionPolicy { keep_last: u64::from(keep_last.max(1)), rollback_window: std::time::Duration::ZERO };
            store.expire_generations(DATASET, &policy, crate::RunMode::Execute).map(|r| format!("expired {:?}", r.expired))
        }
        Op::PlanCleanup => {
            let options = crate::CleanupOptions { age_threshold: std::time::Duration::ZERO, force_short_threshold: true };
            store.plan_cleanup(&options).map(|p| format!("plan {} candidates {}", p.id, p.candidates.len()))
        }
        Op::ApplyCleanup => {
            // Plan ids grow from 1 and only the newest few are kept: probe for the newest.
            let mut newest = None;
            for id in 1..=256 {
                if store.cleanup_plan(id)?.is_some() {
                    newest = Some(id);
                }
            }
            let options = crate::ApplyOptions { mode: crate::RunMode::Execute, ..crate::ApplyOptions::default() };
            store
                .apply_cleanup(newest.unwrap_or(0), &options)
                .map(|r| format!("deleted {} records removed {}", r.deleted.len(), r.attempt_records_removed.len()))
        }
    }
}

/// What the worker of `attempt` writes into its staging directory (while the attempt runs
/// unfinished) and reports: the attempt's key and its candidate.
fn worker_output(store: &Store, run: u8, part: u8, attempt: u32, good: bool) -> crate::Result<(crate::AttemptKey, Candidate)> {
    let key = task_key(run, part).attempt(attempt);
    let (rows, total) = expected(run, part);
    let rows = if good { rows } else { rows + 1 };
    // A worker writes its output only while its attempt runs; once finished, the files
    // are the candidate's and are left alone.
    let staging_rel = store.snapshot()?.attempt(&key)?.filter(|a| a.candidate.is_none()).map(|a| a.staging_rel);
    let mut files = Vec::new();
    if let Some(rel) = staging_rel {
        let dir = store.staging_root().join(rel);
        let mut text = String::from("item,units\n");
        for i in 0..rows {
            let units = if i == 0 { total - (rows as i64 - 1) } else { 1 };
            text.push_str(&format!("{i},{units}\n"));
        }
        std::fs::write(dir.join("part.csv"), text).map_err(|e| Error::io("writing a workload file", e))?;
        files.push(crate::describe_file(&dir, "part.csv")?);
    }
    let candidate = Candidate {
        snapshot: format!("sales@{}", run % RUNS),
        rows: Some(rows),
        total: Some(total),
        digest: Some(format!("rows={rows};total={total}")),
        files,
    };
    Ok((key, candidate))
}

fn normalize(status: &EffectStatus) -> String {
    match status {
        EffectStatus::Recorded => "recorded".into(),
        EffectStatus::Ready { generation } => format!("ready@{generation}"),
        EffectStatus::Emitted { generation, .. } => format!("emitted@{generation}"),
    }
}

/// Everything observable about the universe through the public read API, one line per fact,
/// without timestamps: generations and their manifests, runs, attempts, accepted attempts and
/// side effects. Two stores in the same logical state give equal dumps.
///
/// # Errors
/// Storage and corruption errors from the reads.
pub fn dump(snapshot: &Snapshot) -> crate::Result<Vec<String>> {
    let mut out = Vec::new();
    let current = snapshot.current(DATASET)?;
    out.push(format!("current {:?}", current.as_ref().map(|g| g.number)));
    for generation in snapshot.history(DATASET)? {
        out.push(format!(
            "generation {} parent {} run {} snapshot {} replaced {} kind {:?}",
            generation.number, generation.parent, generation.run, generation.snapshot, generation.partitions_replaced, generation.kind
        ));
        let manifest = snapshot
            .manifest(DATASET, Some(generation.number))?
            .ok_or_else(|| Error::invalid("generation", &generation.number.to_string(), "listed in the history but has no manifest"))?;
        for p in manifest.partitions {
            out.push(format!(
                "  {} since {} run {} attempt {} rows {} total {:?} digest {} at {} files {:?}",
                p.partition, p.since_generation, p.run, p.attempt, p.rows, p.total, p.digest, p.staging_rel, p.files
            ));
        }
    }
    for run in 0..RUNS {
        let Some(info) = snapshot.run(DATASET, &run_id(run))? else { continue };
        out.push(format!("run {} snapshot {} published {:?} tasks {:?}", info.run, info.snapshot, info.published_generation, info.tasks));
        for part in run_partitions(run) {
            let task = task_key(run, part);
            out.push(format!("  task {} accepted {:?}", task.partition, snapshot.accepted(&task)?));
            for attempt in snapshot.attempts(&task)? {
                out.push(format!(
                    "    attempt {} {} at {} candidate {:?}",
                    attempt.key.attempt,
                    attempt.status.name(),
                    attempt.staging_rel,
                    attempt.candidate.map(|c| (c.rows, c.digest, c.files))
                ));
            }
        }
        for effect in snapshot.effects(DATASET, &run_id(run))? {
            out.push(format!("  effect {:?} {:?} {}", effect.key, effect.payload, normalize(&effect.status)));
        }
    }
    Ok(out)
}

/// Options for stores in harness runs: a small cache.
fn harness_options() -> StoreOptions {
    StoreOptions { cache_size_bytes: 4 * 1024 * 1024, ..StoreOptions::default() }
}

/// A temporary directory for harness runs: in memory (`/dev/shm`) where the machine has it,
/// since the harness's stores live in memory anyway and only their staging files touch the
/// file system; `MANIFESTDB_TEST_TMPDIR` overrides.
fn tempdir() -> Result<tempfile::TempDir, String> {
    let base = std::env::var_os("MANIFESTDB_TEST_TMPDIR")
        .map(std::path::PathBuf::from)
        .or_else(|| Some(std::path::PathBuf::from("/dev/shm")).filter(|p| p.is_dir()));
    match base {
        Some(base) => tempfile::Builder::new().prefix("manifestdb-").tempdir_in(&base),
        None => tempfile::tempdir(),
    }
    .map_err(|e| format!("creating a temporary directory: {e}"))
}

/// The fault-free execution of a workload: the observable state before the first op and after
/// each op, each op's outcome, and how many mutating storage operations it took.
#[derive(Debug)]
pub struct Reference {
    ops: Vec<Op>,
    /// The options every store of the run, crash runs and recoveries is opened with.
    options: StoreOptions,
    /// `states[i]` is the dump after the first `i` ops (`states[0]`: freshly created store).
    pub states: Vec<Vec<String>>,
    /// Each op's outcome (`Err` as its message).
    pub outcomes: Vec<Result<String, String>>,
    /// Mutating storage operations of the whole execution, store creation included.
    pub storage_ops: u64,
}

/// How a crash run ended, and where.
#[derive(Debug)]
pub struct CrashRun {
    /// The backend holding the crashed images.
    pub backend: FaultyBackend,
    /// The staging root the crash run used (its files are still there).
    pub staging: tempfile::TempDir,
    /// Ops acknowledged (returned) before the crash.
    pub acked: usize,
    /// True if the crash interrupted op `acked` (or the store's creation when `opened` is
    /// false); false if the whole workload ran before the crash point.
    pub interrupted: bool,
    /// Whether the store's creation completed.
    pub opened: bool,
    /// Publishes acknowledged with `Published(n)`: (op index, n). After an acknowledged
    /// expiry, the older of them may be legitimately gone.
    pub acknowledged_publishes: Vec<(usize, u64)>,
    /// Set once [`Reference::recover`] resumed in `staging`: a recovery changes the staging
    /// files (cleanup deletes some), so each crash run is recovered once.
    recovered: std::sync::atomic::AtomicBool,
}

/// What recovery found.
#[derive(Debug)]
pub struct Recovery {
    /// The step whose state the recovered store equals (ops applied).
    pub recovered_step: usize,
    /// Records verify decoded.
    pub records_verified: u64,
    /// Set when the crash interrupted the store's creation and the image does not open: the
    /// error it gave.
    pub creation_lost: Option<String>,
}

impl Reference {
    /// Runs `ops` on a fault-free backend and records every intermediate state.
    ///
    /// # Errors
    /// A message if the fault-free run fails in a way that is not an op's own refusal.
    pub fn new(ops: &[Op]) -> Result<Reference, String> {
        Reference::with_options(ops, &harness_options())
    }

    /// As [`Reference::new`], with every store (of this run, the crash runs and the
    /// recoveries) opened with `options`, for example without cross-process readers
    /// (`StoreOptions::cross_process_readers`: one-phase commits). Begins without a flush
    /// (`StoreOptions::durable_begins` false) may be forgotten by a power loss, which the
    /// acknowledged-state check does not allow: give `durable_begins: true` with them.
    ///
    /// # Errors
    /// As [`Reference::new`].
    pub fn with_options(ops: &[Op], options: &StoreOptions) -> Result<Reference, String> {
        let options = StoreOptions { cache_size_bytes: 4 * 1024 * 1024, ..options.clone() };
        let backend = FaultyBackend::new();
        let staging = tempdir()?;
        let store = Store::open_with_backend(backend.clone(), staging.path(), &options).map_err(|e| format!("open: {e}"))?;
        let mut states = vec![dump(&store.snapshot().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?];
        let mut outcomes = Vec::new();
        for op in ops {
            let outcome = apply(&store, *op);
            if let Err(e @ (Error::Storage { .. } | Error::Poisoned { .. } | Error::Io { .. } | Error::Corrupted { .. })) = &outcome {
                return Err(format!("fault-free run failed at {op:?}: {e}"));
            }
            outcomes.push(outcome.map_err(|e| e.to_string()));
            states.push(dump(&store.snapshot().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?);
        }
        drop(store);
        Ok(Reference { ops: ops.to_vec(), options, states, outcomes, storage_ops: backend.ops() })
    }

    /// Runs the workload on a backend that loses power at mutating storage operation `k`, until
    /// the first op fails because of it.
    ///
    /// # Errors
    /// A message if an op fails for another reason than the power loss, or succeeds with a
    /// different outcome than in the reference run.
    pub fn crash_run(&self, k: u64) -> Result<CrashRun, String> {
        let backend = FaultyBackend::new();
        backend.power_loss_at(k);
        let staging = tempdir()?;
        let mut run = CrashRun {
            backend: backend.clone(),
            staging,
            acked: 0,
            interrupted: false,
            opened: false,
            acknowledged_publishes: Vec::new(),
            recovered: std::sync::atomic::AtomicBool::new(false),
        };
        let store = match Store::open_with_backend(backend.clone(), run.staging.path(), &self.options) {
            Ok(store) => store,
            Err(e) if backend.powered_off() => {
                run.interrupted = true;
                let _ = e;
                return Ok(run);
            }
            Err(e) => return Err(format!("open failed without a crash: {e}")),
        };
        run.opened = true;
        for (i, op) in self.ops.iter().enumerate() {
            let outcome = apply(&store, *op);
            if backend.powered_off() && outcome.is_err() {
                run.interrupted = true;
                break;
            }
            let outcome = outcome.map_err(|e| e.to_string());
            if outcome != self.outcomes[i] {
                return Err(format!("op {i} {op:?} returned {outcome:?} before the crash, the reference returned {:?}", self.outcomes[i]));
            }
            if let Ok(text) = &outcome
                && let Some(number) = text.strip_prefix("published ")
            {
                run.acknowledged_publishes.push((i, number.parse().map_err(|_| "bad publish summary".to_owned())?));
            }
            run.acked = i + 1;
        }
        drop(store);
        Ok(run)
    }

    /// Reopens the image a crash left under `tear` and checks it: it opens, its state equals
    /// the reference state after the acknowledged ops or after the interrupted one, every
    /// acknowledged publish is there, verify (redb check, records, references, files) is
    /// clean, and finishing the workload from there gives the reference's final state.
    ///
    /// # Errors
    /// A message describing the violated property.
    pub fn recover(&self, crashed: &CrashRun, image: Vec<u8>) -> Result<Recovery, String> {
        // The recovery resumes in the very staging files the crash left: a crash changes no
        // file's inode or times, and cleanup re-checks both, so a copy would not do. To check
        // several images of one crash point, make one crash run per image.
        if crashed.recovered.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err("this crash run was already recovered once; make a crash run per image".to_owned());
        }
        let backend = FaultyBackend::from_image(image);
        let opened = Store::open_with_backend(backend, crashed.staging.path(), &self.options);
        let mut store = match opened {
            Ok(store) => store,
            // The store's creation was never acknowledged: a backend image carries no creation
            // protocol (the file-level open builds a new store under a temporary name instead),
            // so a clear error is an acceptable outcome; a panic would not be.
            Err(e) if !crashed.opened => {
                return Ok(Recovery { recovered_step: 0, records_verified: 0, creation_lost: Some(e.to_string()) });
            }
            Err(e) => return Err(format!("reopening after the crash failed: {e}")),
        };
        let state = dump(&store.snapshot().map_err(|e| e.to_string())?).map_err(|e| format!("reading after the crash failed: {e}"))?;
        let acked = crashed.acked;
        let recovered_step = if state == self.states[acked] {
            acked
        } else if crashed.interrupted && crashed.opened && state == self.states[acked + 1] {
            acked + 1
        } else {
            return Err(format!(
                "recovered state is neither step {acked} nor the interrupted step:\nrecovered: {state:#?}\nexpected: {:#?}",
                self.states[acked]
            ));
        };
        let snapshot = store.snapshot().map_err(|e| e.to_string())?;
        let history = snapshot.history(DATASET).map_err(|e| e.to_string())?;
        let oldest_retained = history.first().map_or(0, |g| g.number);
        let current = snapshot.current(DATASET).map_err(|e| e.to_string())?.map_or(0, |g| g.number);
        for (i, number) in &crashed.acknowledged_publishes {
            let generation = history.iter().find(|g| g.number == *number);
            match (generation, self.ops[*i]) {
                (Some(g), Op::Publish { run }) if g.run == run_id(run) => {}
                // Retention keeps a contiguous range of generations ending at the current one;
                // an acknowledged generation below it was expired by an acknowledged expiry.
                (None, _) if *number < oldest_retained && current > *number => {}
                (other, _) => return Err(format!("acknowledged publish of generation {number} (op {i}) is lost: {other:?}")),
            }
        }
        drop(snapshot);
        let options = VerifyOptions { integrity_check: true, files: Some(FileCheck::Size), staging_root: None, views: true };
        let report = store.verify(&options).map_err(|e| format!("verify failed: {e}"))?;
        if !report.is_clean() {
            return Err(format!("verify after the crash is not clean:\n{report}"));
        }
        for op in &self.ops[recovered_step..] {
            if let Err(e @ (Error::Storage { .. } | Error::Poisoned { .. } | Error::Io { .. } | Error::Corrupted { .. })) =
                apply(&store, *op)
            {
                return Err(format!("resuming the workload failed at {op:?}: {e}"));
            }
        }
        let last = self.states.len() - 1;
        let final_state = dump(&store.snapshot().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
        if final_state != self.states[last] {
            return Err(format!(
                "resuming from step {recovered_step} did not reach the reference's final state:\ngot: {final_state:#?}\nexpected: {:#?}",
                self.states[last]
            ));
        }
        let report = store.verify(&options).map_err(|e| format!("verify failed: {e}"))?;
        if !report.is_clean() {
            return Err(format!("verify after resuming is not clean:\n{report}"));
        }
        Ok(Recovery { recovered_step, records_verified: report.records_total(), creation_lost: None })
    }
}

/// The scripted workload of the crash tests: run 0 over three partitions with a retried task
/// (two valid attempts) and a task whose first attempt is invalid, side effects, a refused
/// publish, a publish, a repeated publish, an emitted effect, then run 1 replacing one
/// partition and adding one, with its own effects and publish; a rollback to generation 1,
/// expiry of old generations, a cleanup plan and its application; then run 2 replacing every
/// partition.
pub fn scripted_workload() -> Vec<Op> {
    let mut ops = vec![Op::Declare { run: 0 }];
    for part in 0..3 {
        ops.push(Op::Begin { run: 0, part });
    }
    ops.push(Op::Begin { run: 0, part: 0 });
    ops.push(Op::Finish { run: 0, part: 0, attempt: 2, good: true });
    ops.push(Op::Finish { run: 0, part: 0, attempt: 1, good: true });
    ops.push(Op::Finish { run: 0, part: 1, attempt: 1, good: true });
    ops.push(Op::Finish { run: 0, part: 2, attempt: 1, good: false });
    ops.push(Op::Begin { run: 0, part: 2 });
    ops.push(Op::Finish { run: 0, part: 2, attempt: 2, good: true });
    ops.push(Op::Validate { run: 0, part: 0, attempt: 2 });
    ops.push(Op::Validate { run: 0, part: 0, attempt: 1 });
    ops.push(Op::Validate { run: 0, part: 1, attempt: 1 });
    ops.push(Op::Validate { run: 0, part: 2, attempt: 1 });
    ops.push(Op::Effect { run: 0, part: None, name: 0 });
    ops.push(Op::Publish { run: 0 });
    ops.push(Op::Validate { run: 0, part: 2, attempt: 2 });
    ops.push(Op::Effect { run: 0, part: Some(1), name: 1 });
    ops.push(Op::Publish { run: 0 });
    ops.push(Op::Publish { run: 0 });
    ops.push(Op::Emit { run: 0, part: None, name: 0 });
    ops.push(Op::Declare { run: 1 });
    ops.push(Op::Begin { run: 1, part: 1 });
    ops.push(Op::Begin { run: 1, part: 3 });
    ops.push(Op::Finish { run: 1, part: 1, attempt: 1, good: true });
    ops.push(Op::Finish { run: 1, part: 3, attempt: 1, good: true });
    ops.push(Op::Effect { run: 1, part: Some(3), name: 0 });
    ops.push(Op::Validate { run: 1, part: 3, attempt: 1 });
    ops.push(Op::Validate { run: 1, part: 1, attempt: 1 });
    ops.push(Op::Read);
    ops.push(Op::Publish { run: 1 });
    ops.push(Op::Emit { run: 1, part: Some(3), name: 0 });
    ops.push(Op::Publish { run: 1 });
    // Roll back to run 0's generation, expire all but the two newest generations, and clean up
    // the dead attempts (the unaccepted retry, the invalid attempt) with their records.
    ops.push(Op::Rollback { to: 1 });
    ops.push(Op::Expire { keep_last: 2 });
    ops.push(Op::PlanCleanup);
    ops.push(Op::ApplyCleanup);
    // Run 2 replaces every partition after the rollback.
    ops.push(Op::Declare { run: 2 });
    // Half of them the three calls, half of them a begin and one `finish_and_validate`.
    for part in 0..PARTITIONS {
        ops.push(Op::Begin { run: 2, part });
        if part % 2 == 0 {
            ops.push(Op::Finish { run: 2, part, attempt: 1, good: true });
            ops.push(Op::Validate { run: 2, part, attempt: 1 });
        } else {
            ops.push(Op::FinishValidate { run: 2, part, attempt: 1, good: true });
        }
    }
    ops.push(Op::Publish { run: 2 });
    ops
}

/// Checks that `path`'s store file opens and that the staging root is usable; a helper for
/// tests that crash store creation at the file level.
///
/// # Errors
/// The store's error.
pub fn open_file_store(path: &Path, staging: &Path) -> crate::Result<Store> {
    Store::open_with_options(path, staging, &harness_options())
}

/// The most ops a fuzz input is decoded into.
pub const FUZZ_OPS_MAX: usize = 64;

/// Decodes a `crash_recovery` fuzz input: bytes 0-1 the crash point (u16 little-endian, taken
/// modulo the storage operations of the workload + 1), byte 2 the tear mode (modulo 4: lose,
/// torn last write, keep, seeded subset), then one op per 3 bytes (see [`encode_fuzz_input`]).
/// Short inputs are padded with zeros.
pub fn decode_fuzz_input(bytes: &[u8]) -> (Vec<Op>, u16, Tear) {
    let byte = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let crash_at = u16::from_le_bytes([byte(0), byte(1)]);
    let seed = u64::from(crc32fast::hash(bytes));
    let tear = match byte(2) % 4 {
        0 => Tear::LoseUnsynced,
        1 => Tear::TornLastWrite,
        2 => Tear::KeepUnsynced,
        _ => Tear::Subset { seed },
    };
    let mut ops = Vec::new();
    for chunk in bytes.get(3..).unwrap_or(&[]).chunks(3).take(FUZZ_OPS_MAX) {
        let (code, a, b) = (chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0));
        let run = a & 0x7f;
        let attempt = 1 + u32::from((b >> 4) % 3);
        let optional_part = if b & 0x80 != 0 { None } else { Some(b & 0x0f) };
        ops.push(match code % 12 {
            0 => Op::Declare { run },
            1 => Op::Begin { run, part: b & 0x0f },
            2 => Op::Finish { run, part: b & 0x0f, attempt, good: a & 0x80 == 0 },
            // The run byte's top bit (unused by a validation) asks for the one-call finish and
            // validation; then bit 6 of the last byte marks bad output.
            3 if a & 0x80 != 0 => Op::FinishValidate { run, part: b & 0x0f, attempt, good: b & 0x40 == 0 },
            3 => Op::Validate { run, part: b & 0x0f, attempt },
            4 => Op::Effect { run, part: optional_part, name: (b >> 4) & 1 },
            5 => Op::Publish { run },
            6 => Op::Emit { run, part: optional_part, name: (b >> 4) & 1 },
            7 => Op::Read,
            8 => Op::Rollback { to: 1 + b % 4 },
            9 => Op::Expire { keep_last: 1 + b % 3 },
            10 => Op::PlanCleanup,
            _ => Op::ApplyCleanup,
        });
    }
    (ops, crash_at, tear)
}

/// Encodes ops (indexes below 16, attempts 1 to 3, rollback targets 1 to 4, keep_last 1 to
/// 3) as a `crash_recovery` fuzz input; the
/// inverse of [`decode_fuzz_input`] for those, used to write seed inputs.
pub fn encode_fuzz_input(ops: &[Op], crash_at: u16, tear: u8) -> Vec<u8> {
    let mut out = crash_at.to_le_bytes().to_vec();
    out.push(tear);
    let attempt_bits = |attempt: u32| ((attempt.clamp(1, 3) - 1) as u8) << 4;
    let optional = |part: Option<u8>| part.map_or(0x80, |p| p & 0x0f);
    for op in ops {
        let chunk = match *op {
            Op::Declare { run } => [0, run, 0],
            Op::Begin { run, part } => [1, run, part & 0x0f],
            Op::Finish { run, part, attempt, good } => [2, run | if good { 0 } else { 0x80 }, (part & 0x0f) | attempt_bits(attempt)],
            Op::Validate { run, part, attempt } => [3, run, (part & 0x0f) | attempt_bits(attempt)],
            Op::FinishValidate { run, part, attempt, good } => {
                [3, run | 0x80, (part & 0x0f) | attempt_bits(attempt) | if good { 0 } else { 0x40 }]
            }
            Op::Effect { run, part, name } => [4, run, optional(part) | ((name & 1) << 4)],
            Op::Publish { run } => [5, run, 0],
            Op::Emit { run, part, name } => [6, run, optional(part) | ((name & 1) << 4)],
            Op::Read => [7, 0, 0],
            Op::Rollback { to } => [8, 0, to.wrapping_sub(1) % 4],
            Op::Expire { keep_last } => [9, 0, keep_last.wrapping_sub(1) % 3],
            Op::PlanCleanup => [10, 0, 0],
            Op::ApplyCleanup => [11, 0, 0],
        };
        out.extend_from_slice(&chunk);
    }
    out
}

/// The whole `crash_recovery` check for one fuzz input: the fault-free reference run of its
/// ops, a crash run losing power at its crash point, and the recovery of the image its tear
/// mode leaves (see [`Reference::recover`]).
///
/// # Errors
/// A message naming the violated property.
pub fn crash_recovery_check(bytes: &[u8]) -> Result<(), String> {
    let (ops, crash_at, tear) = decode_fuzz_input(bytes);
    let reference = Reference::new(&ops)?;
    let k = 1 + u64::from(crash_at) % (reference.storage_ops + 1);
    let crashed = reference.crash_run(k)?;
    reference.recover(&crashed, crashed.backend.crash_image(tear)).map(|_| ()).map_err(|e| format!("crash point {k}, {tear:?}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// The `damaged_store` fuzz target: a valid store image, damaged, driven through the public API.
// ---------------------------------------------------------------------------------------------

/// The most damage operations a `damaged_store` input is decoded into.
pub const DAMAGE_OPS_MAX: usize = 16;

/// Applies a `damaged_store` fuzz input to a copy of `good`: one damage operation per 5 bytes
/// `[kind, offset (3 bytes little-endian, modulo the image length), value]`, kind modulo 4:
/// xor the byte with `value` (at least 1), set it to `value`, cut the image at the offset, or
/// copy the 64 bytes at the offset from page `value` (modulo the pages) to the offset (a
/// misdirected or stale write).
pub fn damage_image(good: &[u8], input: &[u8]) -> Vec<u8> {
    const PAGE_BYTES: usize = 4096;
    let mut image = good.to_vec();
    for chunk in input.chunks(5).take(DAMAGE_OPS_MAX) {
        let byte = |i: usize| chunk.get(i).copied().unwrap_or(0);
        if image.is_empty() {
            break;
        }
        let offset = usize::from(byte(1)) | usize::from(byte(2)) << 8 | usize::from(byte(3)) << 16;
        let at = offset % image.len();
        let value = byte(4);
        match byte(0) % 4 {
            0 => image[at] ^= value.max(1),
            1 => image[at] = value,
            2 => image.truncate(at),
            _ => {
                let pages = image.len().div_ceil(PAGE_BYTES);
                let from = ((usize::from(value) % pages) * PAGE_BYTES + at % PAGE_BYTES).min(image.len());
                let len = 64.min(image.len() - at).min(image.len() - from);
                let copied = image[from..from + len].to_vec();
                image[at..at + len].copy_from_slice(&copied);
            }
        }
    }
    image
}

/// Everything the `damaged_store` fuzz target does with one damaged image, on a store opened on
/// it through [`Store::open_with_backend`] with `staging` as its staging root: a full read,
/// a verify with redb's integrity check, a few writes, and a full read after them. Returns how
/// many of those steps succeeded. Every outcome is acceptable except a panic escaping the
/// public API, which the fuzzer reports.
pub fn damaged_store_run(image: Vec<u8>, staging: &Path) -> usize {
    let mut ok = 0;
    let Ok(mut store) = Store::open_with_backend(FaultyBackend::from_image(image), staging, &harness_options()) else {
        return ok;
    };
    ok += usize::from(store.snapshot().and_then(|s| dump(&s)).is_ok());
    ok += usize::from(store.verify(&VerifyOptions::default()).is_ok_and(|r| r.is_clean()));
    for op in [Op::Declare { run: 2 }, Op::Begin { run: 2, part: 0 }, Op::Publish { run: 1 }, Op::Rollback { to: 2 }, Op::PlanCleanup] {
        ok += usize::from(apply(&store, op).is_ok());
    }
    ok += usize::from(store.snapshot().and_then(|s| dump(&s)).is_ok());
    ok
}
