#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    mpipe::fuzzing::overrides(data);
});
