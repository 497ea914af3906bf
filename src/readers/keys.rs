//! Duplicate grain-key detection with bounded memory.
//!
//! Method: keys go into an exact in-memory hash set until the set's estimated size reaches
//! `key_bytes_in_memory_max`. Then the set is sorted and written as a *run* file into a
//! private spill directory, and the set starts over. At the end, if anything was spilled, the
//! last set is written as a run too and the runs are merged (a k-way merge of sorted files):
//! equal keys from different runs are adjacent, so every repeat is counted exactly.
//!
//! Limits: memory is the in-memory limit (plus the hash table's growth step) while reading,
//! and one 64 KiB read buffer per run while merging (a 10 GiB key volume with the default
//! 64 MiB limit is about 160 runs, 10 MiB of buffers). Disk: the spill holds every key once,
//! length-prefixed, and is deleted when validation ends (also on error). The duplicate
//! reported first is the first repeat in file order while nothing was spilled, and the
//! smallest repeated key (in byte order) after a spill.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Estimated memory of one key in the set beyond its bytes: the boxed slice's pointer and
/// length, the table's control byte and spare capacity, the allocator's rounding.
const KEY_OVERHEAD_BYTES: usize = 48;
/// Read buffer of each run during the merge.
const RUN_READ_BUFFER_BYTES: usize = 64 * 1024;

/// The set of grain keys seen so far, and the duplicates among them.
pub(crate) struct KeySet {
    memory: HashSet<Box<[u8]>>,
    memory_bytes: usize,
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

impl KeySet {
    /// An empty set that spills into a fresh directory under `spill_parent` when the keys
    /// exceed `memory_bytes_max`.
    pub(crate) fn new(memory_bytes_max: usize, spill_parent: &Path) -> KeySet {
        KeySet {
            memory: HashSet::new(),
            memory_bytes: 0,
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
    /// [`Error::Io`] if a run cannot be written to the spill directory.
    pub(crate) fn insert(&mut self, key: &[u8]) -> Result<()> {
        if self.memory.contains(key) {
            self.duplicates += 1;
            if self.first_duplicate.is_none() {
                self.first_duplicate = Some(key.into());
            }
            return Ok(());
        }
        self.memory_bytes += key.len() + KEY_OVERHEAD_BYTES;
        self.memory.insert(key.into());
        if self.memory_bytes >= self.memory_bytes_max {
            self.spill_run()?;
        }
        Ok(())
    }

    fn spill_run(&mut self) -> Result<()> {
        let dir = match self.spill.take() {
            Some(dir) => dir,
            None => tempfile::Builder::new()
                .prefix(".manifestdb-keys-")
                .tempdir_in(&self.spill_parent)
                .map_err(|e| Error::io(format!("creating a key spill directory in {}", self.spill_parent.display()), e))?,
        };
        let path = dir.path().join(format!("run-{}", self.runs.len()));
        self.spill = Some(dir);
        let mut keys: Vec<Box<[u8]>> = self.memory.drain().collect();
        keys.sort_unstable();
        let file = File::create(&path).map_err(|e| Error::io(format!("creating key spill run {}", path.display()), e))?;
        let mut out = BufWriter::with_capacity(RUN_READ_BUFFER_BYTES, file);
        let write = |out: &mut BufWriter<File>| -> io::Result<()> {
            for key in &keys {
                let len = u32::try_from(key.len()).map_err(|_| io::Error::other("key longer than 4 GiB"))?;
                out.write_all(&len.to_le_bytes())?;
                out.write_all(key)?;
            }
            out.flush()
        };
        write(&mut out).map_err(|e| Error::io(format!("writing key spill run {}", path.display()), e))?;
        self.runs.push(path);
        self.memory_bytes = 0;
        // Give the table's memory back too: the next chunk starts small.
        self.memory = HashSet::new();
        Ok(())
    }

    /// Finishes: merges spilled runs if any, and returns the duplicates.
    ///
    /// # Errors
    /// [`Error::Io`] if a run cannot be written or read back.
    pub(crate) fn finish(mut self) -> Result<Duplicates> {
        if self.runs.is_empty() {
            return Ok(Duplicates { count: self.duplicates, first: self.first_duplicate.map(Vec::from), runs_spilled: 0 });
        }
        if !self.memory.is_empty() {
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
        assert!(spilled.runs_spilled > 5, "the small limit must spill");
        assert_eq!(in_memory.count, 500);
        assert_eq!(spilled.count, 500);
        assert!(spilled.first.is_some());
    }

    #[test]
    fn unique_keys_spilled_have_no_duplicates() {
        let keys: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let found = run(&refs, 2048);
        assert_eq!((found.count, found.first), (0, None));
    }
}
