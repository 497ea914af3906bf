//! The one place where records become bytes and bytes become records.
//!
//! redb's `Value::from_bytes` cannot fail, so every value manifestdb stores is a plain byte
//! string framed as
//!
//! ```text
//! [version: u8][crc32 of payload: u32 little-endian][payload: bincode 2, standard config]
//! ```
//!
//! and decoded here, where a short frame, an unknown version, a checksum mismatch or an
//! undecodable payload is an [`Error::Corrupted`] naming the table and the key.
//!
//! Invariant: `decode(table, key, &encode(r)) == Ok(r)` for every record, and `decode` never
//! panics on any input.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Corruption, Error, Result};

/// The record format this build writes and reads.
pub(crate) const RECORD_VERSION: u8 = 1;

/// Bytes of frame before the payload.
pub(crate) const FRAME_HEADER_BYTES: usize = 5;

/// Payloads larger than this are refused when decoding, so that a corrupt length prefix cannot
/// make the decoder allocate gigabytes.
const PAYLOAD_BYTES_MAX: usize = 256 * 1024 * 1024;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<PAYLOAD_BYTES_MAX>()
}

/// Encodes a record into a framed value.
pub(crate) fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    let mut out = vec![0u8; FRAME_HEADER_BYTES];
    // Encoding into a Vec only fails if the type cannot be represented (for example a map with
    // non-serializable keys); none of the record types can, so this is a programming error.
    let written = bincode::serde::encode_into_std_write(record, &mut out, config());
    if let Err(err) = written {
        unreachable!("record types always encode: {err}");
    }
    let crc = crc32fast::hash(&out[FRAME_HEADER_BYTES..]);
    out[0] = RECORD_VERSION;
    out[1..FRAME_HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a framed value. `table` and `key` only serve the error message.
pub(crate) fn decode<T: DeserializeOwned>(table: &'static str, key: &[u8], bytes: &[u8]) -> Result<T> {
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
    let got = crc32fast::hash(payload);
    if expected != got {
        return Err(corrupted(Corruption::ChecksumMismatch { expected, got }));
    }
    let (record, used) = bincode::serde::decode_from_slice::<T, _>(payload, config())
        .map_err(|err| corrupted(Corruption::Undecodable { message: err.to_string() }))?;
    if used != payload.len() {
        return Err(corrupted(Corruption::Undecodable { message: format!("{} trailing bytes after the record", payload.len() - used) }));
    }
    Ok(record)
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
        let bytes = encode(&sample());
        assert_eq!(decode::<Sample>("t", b"k", &bytes).unwrap(), sample());
    }

    #[test]
    fn flipped_payload_bit_is_a_checksum_mismatch_naming_table_and_key() {
        let mut bytes = encode(&sample());
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
        let mut bytes = encode(&sample());
        bytes[0] = 9;
        assert!(matches!(
            decode::<Sample>("t", b"k", &bytes),
            Err(Error::Corrupted { detail: Corruption::UnknownVersion { version: 9 }, .. })
        ));
        let mut bytes = encode(&sample());
        bytes.push(0);
        let crc = crc32fast::hash(&bytes[FRAME_HEADER_BYTES..]);
        bytes[1..5].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(decode::<Sample>("t", b"k", &bytes), Err(Error::Corrupted { detail: Corruption::Undecodable { .. }, .. })));
    }

    #[test]
    fn huge_length_prefix_is_refused_without_allocating() {
        // A string whose varint length claims ~2^60 bytes.
        let payload = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f];
        let mut bytes = vec![RECORD_VERSION, 0, 0, 0, 0];
        bytes.extend_from_slice(&payload);
        let crc = crc32fast::hash(&payload);
        bytes[1..5].copy_from_slice(&crc.to_le_bytes());
        assert!(decode::<Sample>("t", b"k", &bytes).is_err());
    }
}
