//! The store file of a check that writes nothing: redb's file backend whose writes stay in
//! memory.
//!
//! redb's integrity check needs a writable handle held exclusively, and a writable handle
//! writes: its open marks the header "recovery required", the check reloads and may repair the
//! allocator state, and its close commits the allocator state and clears the mark (about 20 KB
//! on a small store, the same content each time but rewritten). `verify --integrity` is a
//! check: [`OverlayFile`] reads the file, keeps every write in memory, page by page, and reads
//! those pages back from memory, so redb sees the state it wrote while the file keeps every
//! byte and its modification time. The byte-range locks are the file's own, so the check still
//! holds the store exclusively against other processes' writers.
//!
//! Invariant: no byte is ever written to the file and its length never changes; a sync is a
//! no-op (nothing of the file changed).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::ops::Bound;

use parking_lot::Mutex;
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The I/O error of a storage backend (redb 4: the standard one).
type BackendIoError = std::io::Error;

/// The granularity of the overlay; any size works, redb's page size keeps it small.
const PAGE_BYTES: u64 = 4096;

/// What the handle wrote, in memory.
#[derive(Debug)]
struct Overlay {
    /// The pages written (whole pages: the file's bytes with the writes on top).
    pages: HashMap<u64, Box<[u8]>>,
    /// The length as the handle sees it.
    len: u64,
    /// The file's bytes at and past this offset read as zeros: the least length the handle ever
    /// set (a shrink then a growth zero-fills, as a file does).
    file_visible: u64,
}

/// redb's file backend with every write kept in memory (see the module's documentation).
#[derive(Debug)]
pub(crate) struct OverlayFile {
    inner: FileBackend,
    overlay: Mutex<Overlay>,
}

impl OverlayFile {
    /// The backend over `file` (opened for reading; the locks need no more).
    pub(crate) fn new(file: File) -> Result<OverlayFile, redb::DatabaseError> {
        #[allow(deprecated, reason = "redb 4's FileBackend::new returns a Result; its replacement is redb 5's")]
        let inner = FileBackend::new(file)?;
        let len = inner.len()?;
        Ok(OverlayFile { inner, overlay: Mutex::new(Overlay { pages: HashMap::new(), len, file_visible: len }) })
    }

    /// Reads `out.len()` bytes of the file at `offset`, the ones at or past `visible` as zeros.
    fn read_file(&self, offset: u64, out: &mut [u8], visible: u64) -> Result<(), BackendIoError> {
        let from_file = usize::try_from(visible.saturating_sub(offset)).unwrap_or(usize::MAX).min(out.len());
        let (head, tail) = out.split_at_mut(from_file);
        if !head.is_empty() {
            self.inner.read(offset, head)?;
        }
        tail.fill(0);
        Ok(())
    }
}

/// Splits `[offset, offset + len)` into (page, offset in the page, bytes, offset in the range).
fn page_spans(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let at = offset + done as u64;
        let page = at / PAGE_BYTES;
        let in_page = (at % PAGE_BYTES) as usize;
        let bytes = (PAGE_BYTES as usize - in_page).min(len - done);
        let span = (page, in_page, bytes, done);
        done += bytes;
        Some(span)
    })
}

fn beyond_end(offset: u64, len: usize, end: u64) -> BackendIoError {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("a read of {len} bytes at {offset} past the end of the store ({end} bytes)"),
    )
}

impl StorageBackend for OverlayFile {
    fn len(&self) -> Result<u64, BackendIoError> {
        Ok(self.overlay.lock().len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        let overlay = self.overlay.lock();
        if offset.checked_add(out.len() as u64).is_none_or(|end| end > overlay.len) {
            return Err(beyond_end(offset, out.len(), overlay.len));
        }
        for (page, in_page, bytes, at) in page_spans(offset, out.len()) {
            let part = &mut out[at..at + bytes];
            match overlay.pages.get(&page) {
                Some(written) => part.copy_from_slice(&written[in_page..in_page + bytes]),
                None => self.read_file(page * PAGE_BYTES + in_page as u64, part, overlay.file_visible)?,
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        let mut overlay = self.overlay.lock();
        if len < overlay.len {
            // Bytes past the new end are gone: a later growth reads them as zeros.
            overlay.pages.retain(|page, _| page * PAGE_BYTES < len);
            let last = len / PAGE_BYTES;
            let cut = (len % PAGE_BYTES) as usize;
            if let Some(page) = overlay.pages.get_mut(&last) {
                page[cut..].fill(0);
            }
            overlay.file_visible = overlay.file_visible.min(len);
        }
        overlay.len = len;
        Ok(())
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        // Nothing of the file changed.
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        let mut overlay = self.overlay.lock();
        let visible = overlay.file_visible;
        for (page, in_page, bytes, at) in page_spans(offset, data.len()) {
            let written = match overlay.pages.entry(page) {
                Entry::Occupied(written) => written.into_mut(),
                Entry::Vacant(vacant) => {
                    let mut whole = vec![0u8; PAGE_BYTES as usize].into_boxed_slice();
                    self.read_file(page * PAGE_BYTES, &mut whole, visible)?;
                    vacant.insert(whole)
                }
            };
            written[in_page..in_page + bytes].copy_from_slice(&data[at..at + bytes]);
        }
        let end = offset.saturating_add(data.len() as u64);
        if end > overlay.len {
            overlay.len = end;
        }
        Ok(())
    }

    fn close(&self) -> Result<(), BackendIoError> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(bytes: &[u8]) -> (tempfile::NamedTempFile, OverlayFile) {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(&mut file, bytes).expect("write");
        let backend = OverlayFile::new(file.reopen().expect("reopen")).expect("backend");
        (file, backend)
    }

    fn read(backend: &OverlayFile, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        backend.read(offset, &mut out).expect("read");
        out
    }

    #[test]
    fn writes_read_back_and_never_reach_the_file() {
        let original: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (file, backend) = backend(&original);
        // Across a page boundary, and past the end.
        backend.write(4090, &[1; 20]).expect("write");
        backend.write(9_990, &[2; 30]).expect("write past the end");
        assert_eq!(backend.len().expect("len"), 10_020);
        let seen = read(&backend, 4080, 40);
        assert_eq!(&seen[..10], &original[4080..4090]);
        assert_eq!(&seen[10..30], &[1; 20]);
        assert_eq!(&seen[30..], &original[4110..4120]);
        assert_eq!(read(&backend, 9_980, 40)[10..], [2; 30]);
        backend.sync_data().expect("sync");
        backend.close().expect("close");
        assert_eq!(std::fs::read(file.path()).expect("read the file"), original, "the file is unchanged");
    }

    #[test]
    fn a_shrink_then_a_growth_reads_zeros_and_reads_past_the_end_fail() {
        let (_file, backend) = backend(&[7; 9000]);
        backend.write(8000, &[3; 10]).expect("write");
        backend.set_len(5000).expect("shrink");
        assert!(backend.read(4999, &mut [0; 2]).is_err(), "past the end");
        backend.set_len(9000).expect("grow");
        assert_eq!(read(&backend, 4995, 10), [7, 7, 7, 7, 7, 0, 0, 0, 0, 0]);
        assert_eq!(read(&backend, 8000, 10), [0; 10], "the write past the shrink is gone");
    }
}
