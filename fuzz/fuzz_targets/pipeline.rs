#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = mpipe::fuzzing::pipeline(data);
});
