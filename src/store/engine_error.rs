//! redb's errors as the opaque [`StorageError`]: the one place that knows which redb error is
//! which kind of failure.

use crate::error::{Error, StorageError, StorageErrorKind};

impl Error {
    /// A storage error of redb while doing `context`.
    pub(crate) fn storage(context: &'static str, source: impl Into<redb::Error>) -> Self {
        Error::Storage { context, source: from_redb(source.into()) }
    }
}

/// Classifies a redb error. manifestdb creates every table with the same types when it creates
/// a store, so a table that is missing or has other types means the file was damaged, as does
/// redb's own corruption report and its poisoned state after a contained panic. redb reports a
/// file that is not a redb database (bad magic number, garbage) as an I/O error of kind
/// `InvalidData`, and a file cut short as `UnexpectedEof`.
fn from_redb(err: redb::Error) -> StorageError {
    use StorageErrorKind as K;
    let err = match err {
        redb::Error::Io(io) => {
            let kind =
                if matches!(io.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof) { K::NotAStore } else { K::Io };
            return StorageError::new(kind, format!("I/O error: {io}"), Some(io));
        }
        other => other,
    };
    let kind = match &err {
        redb::Error::UpgradeRequired(_) => K::NotAStore,
        redb::Error::Corrupted(_)
        | redb::Error::TableTypeMismatch { .. }
        | redb::Error::TableIsMultimap(_)
        | redb::Error::TableIsNotMultimap(_)
        | redb::Error::TypeDefinitionChanged { .. }
        | redb::Error::TableDoesNotExist(_)
        | redb::Error::ValueTooLarge(_)
        | redb::Error::LockPoisoned(_)
        | redb::Error::TransactionPoisoned => K::Corrupt,
        redb::Error::PreviousIo | redb::Error::Backend(_) => K::Io,
        redb::Error::DatabaseAlreadyOpen | redb::Error::WouldBlock => K::Busy,
        _ => K::Other,
    };
    StorageError::new(kind, err, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_store_and_a_damaged_one_are_corruption_and_a_full_disk_is_not() {
        let not_a_store = Error::storage("opening", redb::Error::Io(std::io::Error::from(std::io::ErrorKind::InvalidData)));
        let damaged = Error::storage("reading", redb::Error::Corrupted("bad page".into()));
        let full = Error::storage("writing", redb::Error::Io(std::io::Error::from(std::io::ErrorKind::StorageFull)));
        assert!(not_a_store.is_corruption() && damaged.is_corruption() && !full.is_corruption());
        let Error::Storage { source, .. } = &full else { panic!("{full:?}") };
        assert_eq!(source.kind(), StorageErrorKind::Io);
        let io = std::error::Error::source(source).and_then(|e| e.downcast_ref::<std::io::Error>()).map(std::io::Error::kind);
        assert_eq!(io, Some(std::io::ErrorKind::StorageFull), "the OS error stays reachable as the source");
        assert_eq!(full.kind(), crate::ErrorKind::Fault);
        assert_eq!(not_a_store.kind(), crate::ErrorKind::Corrupt);
        assert_eq!(Error::storage("opening", redb::Error::DatabaseAlreadyOpen).kind(), crate::ErrorKind::Busy);
    }
}
