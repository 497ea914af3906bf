//! Duplicate grain-key detection with bounded memory.
//!
//! Method: every row's encoded key goes into an in-memory *chunk*: its bytes, length-prefixed,
//! appended to an arena, and one 8-byte entry per row, `hash tag << 32 | arena offset`, where
//! the tag is 32 bits of the key's `foldhash` under a random per-set seed. Nothing is probed
//! per row: a hash table of a million keys costs a cache miss per row (measured at about
//! 200 ns per key on this project's 2-core machine, against about 50 ns for appending and
//! sorting, see the book's performance chapter), while appending is sequential. A chunk is
//! checked once, when it is complete: its entries are sorted as integers (by tag, then by
//! offset, which is file order), so rows with equal tags are adjacent; each group of equal
//! tags is sorted by key bytes and compared byte for byte, so the check is exact: every
//! occurrence of a key after its first is a duplicate, and different keys that share a tag
//! are told apart. The chunk then keeps one entry per distinct key.
//!
//! When a chunk's memory (arena and entries, counted by allocated capacity) would pass
//! `key_bytes_in_memory_max`, the chunk is checked, its distinct keys are sorted by bytes and
//! written as a *run* file into a private spill directory, and a new chunk starts. At the
//! end, if anything was spilled, the last chunk is written as a run too and the runs are
//! merged (a k-way merge of sorted files): each run holds a key once, and equal keys from
//! different runs are adjacent, so every repeat is counted exactly.
//!
//! Limits: memory is the in-memory limit while reading (every row, repeated or not, costs
//! its key's bytes, 4 bytes of length and 8 bytes of entry until its chunk is checked), and
//! one 64 KiB read buffer per run while merging (a 10 GiB key volume with the default 64 MiB
//! limit is about 160 runs, 10 MiB of buffers). Disk: the spill holds every distinct key of
//! every chunk once, length-prefixed, and is deleted when validation ends (also on error).
//! The duplicate reported first is the first repeat in file order while nothing was spilled,
//! and the smallest repeated key (in byte order) among that of the first chunk holding a
//! repeat and the repeats across runs after a spill.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::hash::BuildHasher;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Memory of one entry of a chunk.
const ENTRY_BYTES: usize = std::mem::size_of::<u64>();
/// Entries a chunk reserves first (then it doubles).
const ENTRIES_FIRST: usize = 64;
/// Read buffer of each run during the merge.
const RUN_READ_BUFFER_BYTES: usize = 64 * 1024;
/// Bytes of the length prefix of a key in the arena.
const LEN_BYTES: usize = 4;

/// The arena offset of an entry (its low 32 bits).
fn offset_of(entry: u64) -> usize {
    (entry & u64::from(u32::MAX)) as usize
}

/// The set of grain keys seen so far, and the duplicates among them.
pub(crate) struct KeySet {
    /// One entry per row of the current chunk (`tag << 32 | offset`); after a check, one per
    /// distinct key.
    entries: Vec<u64>,
    /// Every key of the current chunk: `u32 LE length, bytes`, one after the other.
    arena: Vec<u8>,
    hasher: foldhash::fast::RandomState,
    memory_bytes_max: usize,
    spill_parent: PathBuf,
    spill: Option<tempfile::TempDir>,
    runs: Vec<PathBuf>,
    duplicates: u64,
    first_duplicate: Option<Box<[u8]>>,
}

/// What the key set found.
#[derive(Debug)]
pub(crate) struct Duplicates {
    /// Rows whose key an earlier row already held (`keys - distinct keys`).
    pub(crate) count: u64,
    /// One repeated key (see the module docs for which).
    pub(crate) first: Option<Vec<u8>>,
    /// How many sorted runs were spilled to disk (0: everything fit in memory).
    pub(crate) runs_spilled: usize,
}

/// The key stored at `offset` of `arena`.
fn key_at(arena: &[u8], offset: usize) -> &[u8] {
    let mut len = [0u8; LEN_BYTES];
    len.copy_from_slice(&arena[offset..offset + LEN_BYTES]);
    let start = offset + LEN_BYTES;
    &arena[start..start + u32::from_le_bytes(len) as usize]
}

impl KeySet {
    /// An empty set that spills into a fresh directory under `spill_parent` when the keys
    /// exceed `memory_bytes_max`.
    pub(crate) fn new(memory_bytes_max: usize, spill_parent: &Path) -> KeySet {
        KeySet {
            entries: Vec::new(),
            arena: Vec::new(),
            hasher: foldhash::fast::RandomState::default(),
            memory_bytes_max,
            spill_parent: spill_parent.to_path_buf(),
            spill: None,
            runs: Vec::new(),
            duplicates: 0,
            first_duplicate: None,
        }
    }

    /// Adds one row's encoded key.
    ///
    /// # Errors
    /// [`Error::Io`] if a run cannot be written to the spill directory, or
    /// [`Error::InvalidInput`] for a key of 4 GiB or more (the readers' record limit is far
    /// below).
    pub(crate) fn insert(&mut self, key: &[u8]) -> Result<()> {
        let tag = (self.hasher.hash_one(key) >> 32) as u32;
        self.insert_tagged(key, tag)
    }

    /// [`KeySet::insert`] with the key's tag given (tests force equal tags with it).
    fn insert_tagged(&mut self, key: &[u8], tag: u32) -> Result<()> {
        let len = u32::try_from(key.len()).map_err(|_| Error::invalid("grain key", "(a key)", "is 4 GiB or longer"))?;
        // The chunk grows only here, by reservations made here, so the limit bounds what is
        // allocated, not only what is used: growth that would pass it (or an arena past
        // 4 GiB, which the offsets cannot address) spills first.
        let arena_needed = self.arena.len() + LEN_BYTES + key.len();
        let entries_full = self.entries.len() == self.entries.capacity();
        let arena_grows = arena_needed > self.arena.capacity();
        if entries_full || arena_grows {
            let next_entries = if entries_full { (self.entries.capacity() * 2).max(ENTRIES_FIRST) } else { self.entries.capacity() };
            let next_arena = if arena_grows { (self.arena.capacity() * 2).max(arena_needed) } else { self.arena.capacity() };
            let over = next_arena.saturating_add(next_entries.saturating_mul(ENTRY_BYTES)) > self.memory_bytes_max
                || u32::try_from(arena_needed).is_err();
            if over && !self.entries.is_empty() {
                self.spill_run()?;
            }
            // After a spill the chunk is empty: it starts small again.
            if self.entries.len() == self.entries.capacity() {
                let next = (self.entries.capacity() * 2).max(ENTRIES_FIRST);
                self.entries.reserve_exact(next - self.entries.len());
            }
            let arena_needed = self.arena.len() + LEN_BYTES + key.len();
            if arena_needed > self.arena.capacity() {
                let next = (self.arena.capacity() * 2).max(arena_needed);
                self.arena.reserve_exact(next - self.arena.len());
            }
        }
        // Below 4 GiB: checked above (an empty arena starts at 0).
        let offset = u32::try_from(self.arena.len()).unwrap_or(u32::MAX);
        self.entries.push(u64::from(tag) << 32 | u64::from(offset));
        self.arena.extend_from_slice(&len.to_le_bytes());
        self.arena.extend_from_slice(key);
        Ok(())
    }

    /// Checks the current chunk: counts its repeats exactly, records the first one in file
    /// order (if no earlier chunk had one), and leaves one entry per distinct key.
    fn check_chunk(&mut self) {
        let arena = &self.arena;
        let entries = &mut self.entries;
        // By tag, then by offset: equal tags are adjacent, each group in file order.
        entries.sort_unstable();
        let mut first_repeat: Option<usize> = None;
        let mut kept = 0;
        let mut i = 0;
        while i < entries.len() {
            let tag = entries[i] >> 32;
            let mut end = i + 1;
            while end < entries.len() && entries[end] >> 32 == tag {
                end += 1;
            }
            if end - i > 1 {
                // Rows sharing a tag: equal keys together, each key's first occurrence first
                // (the entries of one tag differ only by offset).
                entries[i..end].sort_unstable_by(|a, b| key_at(arena, offset_of(*a)).cmp(key_at(arena, offset_of(*b))).then(a.cmp(b)));
            }
            let mut previous: Option<u64> = None;
            for k in i..end {
                let entry = entries[k];
                let repeat = previous.is_some_and(|p| key_at(arena, offset_of(p)) == key_at(arena, offset_of(entry)));
                if repeat {
                    self.duplicates += 1;
                    let offset = offset_of(entry);
                    if first_repeat.is_none_or(|f| offset < f) {
                        first_repeat = Some(offset);
                    }
                } else {
                    // `kept <= k`: compacting in place never overwrites an entry still to be read.
                    entries[kept] = entry;
                    kept += 1;
                    previous = Some(entry);
                }
            }
            i = end;
        }
        entries.truncate(kept);
        if self.first_duplicate.is_none()
            && let Some(offset) = first_repeat
        {
            self.first_duplicate = Some(key_at(arena, offset).into());
        }
    }

    fn spill_run(&mut self) -> Result<()> {
        self.check_chunk();
        let dir = match self.spill.take() {
            Some(dir) => dir,
            None => tempfile::Builder::new()
                .prefix(".manifestdb-keys-")
                .tempdir_in(&self.spill_parent)
                .map_err(|e| Error::io(format!("creating a key spill directory in {}", self.spill_parent.display()), e))?,
        };
        let path = dir.path().join(format!("run-{}", self.runs.len()));
        self.spill = Some(dir);
        // Give the chunk's memory back: the next one starts small.
        let arena = std::mem::take(&mut self.arena);
        let mut entries = std::mem::take(&mut self.entries);
        entries.sort_unstable_by(|a, b| key_at(&arena, offset_of(*a)).cmp(key_at(&arena, offset_of(*b))));
        let file = File::create(&path).map_err(|e| Error::io(format!("creating key spill run {}", path.display()), e))?;
        let mut out = BufWriter::with_capacity(RUN_READ_BUFFER_BYTES, file);
        let write = |out: &mut BufWriter<File>| -> io::Result<()> {
            for &entry in &entries {
                // The arena holds each key with its length prefix: the run's record as it is.
                let offset = offset_of(entry);
                let key = key_at(&arena, offset);
                out.write_all(&arena[offset..offset + LEN_BYTES + key.len()])?;
            }
            out.flush()
        };
        write(&mut out).map_err(|e| Error::io(format!("writing key spill run {}", path.display()), e))?;
        self.runs.push(path);
        Ok(())
    }

    /// Finishes: checks the last chunk, merges spilled runs if any, and returns the
    /// duplicates.
    ///
    /// # Errors
    /// [`Error::Io`] if a run cannot be written or read back.
    pub(crate) fn finish(mut self) -> Result<Duplicates> {
        if self.runs.is_empty() {
            self.check_chunk();
            return Ok(Duplicates { count: self.duplicates, first: self.first_duplicate.map(Vec::from), runs_spilled: 0 });
        }
        if !self.entries.is_empty() {
            self.spill_run()?;
        }
        let mut readers = Vec::with_capacity(self.runs.len());
        for path in &self.runs {
            let file = File::open(path).map_err(|e| Error::io(format!("opening key spill run {}", path.display()), e))?;
            readers.push((BufReader::with_capacity(RUN_READ_BUFFER_BYTES, file), path.clone()));
        }
        let mut heap = BinaryHeap::with_capacity(readers.len());
        for (i, (reader, path)) in readers.iter_mut().enumerate() {
            if let Some(key) = next_key(reader, path)? {
                heap.push(Reverse((key, i)));
            }
        }
        let mut smallest_repeat: Option<Vec<u8>> = None;
        let mut previous: Option<Vec<u8>> = None;
        while let Some(Reverse((key, i))) = heap.pop() {
            let (reader, path) = &mut readers[i];
            if let Some(next) = next_key(reader, path)? {
                heap.push(Reverse((next, i)));
            }
            if previous.as_ref() == Some(&key) {
                // Each run holds a key at most once, so an equal neighbour is a repeat from
                // another run.
                self.duplicates += 1;
                if smallest_repeat.is_none() {
                    smallest_repeat = Some(key.clone());
                }
            }
            previous = Some(key);
        }
        let first = match (self.first_duplicate.map(Vec::from), smallest_repeat) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(Duplicates { count: self.duplicates, first, runs_spilled: self.runs.len() })
    }
}

fn next_key(reader: &mut BufReader<File>, path: &Path) -> Result<Option<Vec<u8>>> {
    let context = || format!("reading key spill run {}", path.display());
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(Error::io(context(), e)),
    }
    let mut key = vec![0u8; u32::from_le_bytes(len) as usize];
    reader.read_exact(&mut key).map_err(|e| Error::io(context(), e))?;
    Ok(Some(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(keys: &[&[u8]], memory_max: usize) -> Duplicates {
        let dir = tempfile::tempdir().unwrap();
        let mut set = KeySet::new(memory_max, dir.path());
        for key in keys {
            set.insert(key).unwrap();
        }
        let found = set.finish().unwrap();
        // The spill directory is gone once the set is.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        found
    }

    #[test]
    fn in_memory_counts_repeats_and_names_the_first_in_file_order() {
        let found = run(&[b"b", b"a", b"b", b"c", b"a", b"b"], 1 << 20);
        assert_eq!((found.count, found.first.as_deref(), found.runs_spilled), (3, Some(&b"b"[..]), 0));
    }

    #[test]
    fn spilled_runs_count_exactly_the_same() {
        let keys: Vec<Vec<u8>> = (0..2000u32).map(|i| (i % 1500).to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let in_memory = run(&refs, 1 << 30);
        let spilled = run(&refs, 4096);
        assert!(spilled.runs_spilled > 5, "the small limit must spill: {spilled:?}");
        assert_eq!(in_memory.count, 500);
        assert_eq!(spilled.count, 500);
        assert!(spilled.first.is_some());
    }

    #[test]
    fn keys_sharing_a_tag_are_told_apart_and_counted_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut set = KeySet::new(1 << 20, dir.path());
        // Every key under one tag: only the byte comparison can tell them apart.
        for key in [&b"a"[..], b"b", b"c", b"b", b"a", b"b", b"d"] {
            set.insert_tagged(key, 7).unwrap();
        }
        let found = set.finish().unwrap();
        // b repeats at row 3 (the first repeat in file order), a at row 4, b again at row 5.
        assert_eq!((found.count, found.first.as_deref(), found.runs_spilled), (3, Some(&b"b"[..]), 0));
    }

    #[test]
    fn counts_equal_a_model_in_memory_and_spilled() {
        // A small linear congruential sequence: keys of 1 to 12 bytes with many repeats.
        let mut state = 0x2545_f491_u64;
        let mut keys = Vec::new();
        for _ in 0..5000 {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let value = (state >> 33) % 3000;
            let len = 1 + (state >> 60) as usize % 12;
            keys.push(value.to_le_bytes().iter().cycle().take(len).copied().collect::<Vec<u8>>());
        }
        let mut seen = std::collections::HashSet::new();
        let mut first = None;
        for key in &keys {
            if !seen.insert(key.clone()) && first.is_none() {
                first = Some(key.clone());
            }
        }
        let expected = (keys.len() - seen.len()) as u64;
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let in_memory = run(&refs, 1 << 30);
        assert_eq!((in_memory.count, in_memory.first, in_memory.runs_spilled), (expected, first, 0));
        for limit in [512, 4096, 32 * 1024] {
            let spilled = run(&refs, limit);
            assert!(spilled.runs_spilled > 1, "limit {limit} must spill: {spilled:?}");
            assert_eq!(spilled.count, expected, "limit {limit}");
            let repeat = spilled.first.expect("a repeat");
            assert!(keys.iter().filter(|k| **k == repeat).count() > 1, "the reported key repeats");
        }
    }

    #[test]
    fn unique_keys_spilled_have_no_duplicates() {
        let keys: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let found = run(&refs, 2048);
        assert_eq!((found.count, found.first), (0, None));
    }
}
