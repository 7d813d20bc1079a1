#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| corelog_fuzz_targets::checkpoints(data));
