//! The codec's contract (see `testing::decode_contract_check`): raw bytes read as a value of
//! every table decode to a record that round-trips and is bound to its table and key, or fail
//! as corruption; a valid frame with any damage decodes to the same record or fails as
//! corruption, never to another record; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(broken) = manifestdb::testing::decode_contract_check(data) {
        panic!("{broken}");
    }
});
