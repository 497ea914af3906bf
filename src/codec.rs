//! The one place where records become bytes and bytes become records.
//!
//! redb's `Value::from_bytes` cannot fail, so every value manifestdb stores is a plain byte
//! string framed as
//!
//! ```text
//! [version: u8][crc32: u32 little-endian][payload: bincode 2, standard config]
//! crc32 = CRC32(table name, 0, key length as u32 little-endian, key, payload)
//! ```
//!
//! and decoded here, where a short frame, an unknown version, a checksum mismatch or an
//! undecodable payload is an [`Error::Corrupted`] naming the table and the key.
//!
//! The checksum covers the table and the key the value is stored under, not only the value:
//! a key damaged on disk (a flipped bit turning partition `k=1` into `k=3`) would otherwise
//! hand another record's data back as the asked-for one. Read under any other key or table, a
//! frame fails its checksum.
//!
//! Invariant: `decode(table, key, &encode(table, key, r)) == Ok(r)` for every record, decoding
//! it under another table or key is a checksum mismatch, and `decode` never panics on any
//! input.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Corruption, Error, Result};

/// The record format this build writes and reads (2: the checksum covers table and key).
pub(crate) const RECORD_VERSION: u8 = 2;

/// Bytes of frame before the payload.
pub(crate) const FRAME_HEADER_BYTES: usize = 5;

/// Payloads larger than this are refused when decoding, so that a corrupt length prefix cannot
/// make the decoder allocate gigabytes.
const PAYLOAD_BYTES_MAX: usize = 256 * 1024 * 1024;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<PAYLOAD_BYTES_MAX>()
}

/// The frame checksum of `payload` stored in `table` under `key`.
fn checksum(table: &str, key: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(table.as_bytes());
    hasher.update(&[0]);
    // Keys are far below 4 GiB (redb's limit is 3 GiB); the length keeps `key ++ payload`
    // boundaries unambiguous.
    hasher.update(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes());
    hasher.update(key);
    hasher.update(payload);
    hasher.finalize()
}

/// Encodes a record into the framed value stored in `table` under `key`.
pub(crate) fn encode<T: Serialize>(table: &str, key: &[u8], record: &T) -> Vec<u8> {
    let mut out = vec![0u8; FRAME_HEADER_BYTES];
    // Encoding into a Vec only fails if the type cannot be represented (for example a map with
    // non-serializable keys); none of the record types can, so this is a programming error.
    let written = bincode::serde::encode_into_std_write(record, &mut out, config());
    if let Err(err) = written {
        unreachable!("record types always encode: {err}");
    }
    let crc = checksum(table, key, &out[FRAME_HEADER_BYTES..]);
    out[0] = RECORD_VERSION;
    out[1..FRAME_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes the framed value stored in `table` under `key`.
pub(crate) fn decode<T: DeserializeOwned>(table: &'static str, key: &[u8], bytes: &[u8]) -> Result<T> {
    let payload = check_frame(table, key, bytes)?;
    let corrupted = |detail| Error::Corrupted { table, key: printable_key(key), detail };
    let (record, used) = bincode::serde::decode_from_slice::<T, _>(payload, config())
        .map_err(|err| corrupted(Corruption::Undecodable { message: err.to_string() }))?;
    if used != payload.len() {
        return Err(corrupted(Corruption::Undecodable { message: format!("{} trailing bytes after the record", payload.len() - used) }));
    }
    Ok(record)
}

/// Checks a frame's version and checksum (for `table` and `key`) without decoding its
/// payload; returns the payload.
pub(crate) fn check_frame<'b>(table: &'static str, key: &[u8], bytes: &'b [u8]) -> Result<&'b [u8]> {
    let corrupted = |detail| Error::Corrupted { table, key: printable_key(key), detail };
    if bytes.len() < FRAME_HEADER_BYTES {
        return Err(corrupted(Corruption::Truncated { len: bytes.len() }));
    }
    let version = bytes[0];
    if version != RECORD_VERSION {
        return Err(corrupted(Corruption::UnknownVersion { version }));
    }
    let mut crc_bytes = [0u8; 4];
    crc_bytes.copy_from_slice(&bytes[1..FRAME_HEADER_BYTES]);
    let expected = u32::from_le_bytes(crc_bytes);
    let payload = &bytes[FRAME_HEADER_BYTES..];
    let got = checksum(table, key, payload);
    if expected != got {
        return Err(corrupted(Corruption::ChecksumMismatch { expected, got }));
    }
    Ok(payload)
}

/// Renders a composite key (fields separated by NUL, numbers as 8 big-endian bytes) for humans.
pub(crate) fn printable_key(key: &[u8]) -> String {
    let mut out = String::new();
    for (i, field) in key.split(|b| *b == 0).enumerate() {
        if i > 0 {
            out.push('/');
        }
        match std::str::from_utf8(field) {
            Ok(s) if s.chars().all(|c| !c.is_control()) => out.push_str(s),
            _ => {
                out.push_str("0x");
                for b in field {
                    out.push_str(&format!("{b:02x}"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sample {
        name: String,
        rows: u64,
        total: Option<i64>,
    }

    fn sample() -> Sample {
        Sample { name: "date=2026-11-29/region=eu".into(), rows: 12, total: Some(-5) }
    }

    #[test]
    fn round_trips() {
        let bytes = encode("t", b"k", &sample());
        assert_eq!(decode::<Sample>("t", b"k", &bytes).unwrap(), sample());
    }

    #[test]
    fn a_frame_read_under_another_key_or_table_is_a_checksum_mismatch() {
        let bytes = encode("versions", b"ds\0k=1", &sample());
        for (table, key) in [("versions", &b"ds\0k=3"[..]), ("versions", b"ds\0k=1\0"), ("runs", b"ds\0k=1"), ("versions", b"")] {
            assert!(
                matches!(decode::<Sample>(table, key, &bytes), Err(Error::Corrupted { detail: Corruption::ChecksumMismatch { .. }, .. })),
                "{table} {key:?}"
            );
        }
    }

    #[test]
    fn flipped_payload_bit_is_a_checksum_mismatch_naming_table_and_key() {
        let mut bytes = encode("attempts_v1", b"ds\0run", &sample());
        let last = bytes.len() - 1;
        bytes[last] ^= 0x10;
        let err = decode::<Sample>("attempts_v1", b"ds\0run", &bytes).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, Error::Corrupted { detail: Corruption::ChecksumMismatch { .. }, .. }));
        assert!(message.contains("attempts_v1") && message.contains("ds/run"), "{message}");
    }

    #[test]
    fn short_unknown_version_and_trailing_bytes_are_errors() {
        assert!(matches!(decode::<Sample>("t", b"k", &[1, 2]), Err(Error::Corrupted { detail: Corruption::Truncated { len: 2 }, .. })));
        let mut bytes = encode("t", b"k", &sample());
        bytes[0] = 9;
        assert!(matches!(
            decode::<Sample>("t", b"k", &bytes),
            Err(Error::Corrupted { detail: Corruption::UnknownVersion { version: 9 }, .. })
        ));
        let mut bytes = encode("t", b"k", &sample());
        bytes.push(0);
        let crc = checksum("t", b"k", &bytes[FRAME_HEADER_BYTES..]);
        bytes[1..5].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode::<Sample>("t", b"k", &bytes), Err(Error::Corrupted { detail: Corruption::Undecodable { .. }, .. })));
    }

    #[test]
    fn huge_length_prefix_is_refused_without_allocating() {
        // A string whose varint length claims ~2^60 bytes.
        let payload = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f];
        let mut bytes = vec![RECORD_VERSION, 0, 0, 0, 0];
        bytes.extend_from_slice(&payload);
        let crc = checksum("t", b"k", &payload);
        bytes[1..5].copy_from_slice(&crc.to_le_bytes());
        assert!(decode::<Sample>("t", b"k", &bytes).is_err());
    }
}
