//! An arbitrary sequence of store operations, a crash point and a tear mode: the store must
//! reopen on the reference state after the acknowledged operations or the in-flight one,
//! verify clean, and finish the workload to the reference's final state.
//! Input format: `manifestdb::testing::decode_fuzz_input`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = manifestdb::testing::crash_recovery_check(data) {
        panic!("{violation}");
    }
});
