//! A valid store image (the committed `tests/fixtures/good.redb`), damaged as the input says
//! (see `testing::damage_image`), then opened, read, verified and written through the public
//! API. Any panic that escapes the API fails the target. redb panics on many damaged files;
//! manifestdb contains those at its boundary, so the hook below does not treat a panic raised
//! inside redb's source as a failure by itself: only one that unwinds out of the API does
//! (libFuzzer's harness aborts on it).
#![no_main]

use std::sync::{Once, OnceLock};

use libfuzzer_sys::fuzz_target;

static GOOD: &[u8] = include_bytes!("../../tests/fixtures/good.redb");

fn staging() -> &'static std::path::Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary staging root")).path()
}

fn allow_contained_redb_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_redb = info.location().is_some_and(|l| l.file().contains("/redb-") || l.file().contains("/redb/src/"));
            if !in_redb {
                fuzzer_hook(info);
            }
        }));
    });
}

fuzz_target!(|data: &[u8]| {
    allow_contained_redb_panics();
    let image = manifestdb::testing::damage_image(GOOD, data);
    manifestdb::testing::damaged_store_run(image, staging());
});
