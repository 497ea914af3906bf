//! Raw bytes as a value of every table: the codec must return a value or an error, never
//! panic; a frame that decodes must re-decode identically.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let first = manifestdb::testing::decode_any_record(data);
    let second = manifestdb::testing::decode_any_record(data);
    for ((table, a), (_, b)) in first.iter().zip(&second) {
        assert_eq!(a.is_ok(), b.is_ok(), "decoding {table} is not deterministic");
    }
});
