//! The sandbox's inner helper as a program of its own, installed beside `baton`: bubblewrap
//! execs it for every sandboxed command, and a small binary starts in a fraction of the time
//! the whole agent takes to load (see `baton::sandbox::inner`).

// No Rust runtime set-up: it would read and parse /proc/self/maps to find the main thread's
// stack (a tenth of this program's start-up) and ignore SIGPIPE, neither of which a program
// that execs at once needs. The arguments still come through `std::env::args_os`.
#![no_main]

#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> i32 {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    baton::sandbox::inner::run_if_requested(&argv).unwrap_or_else(|| {
        eprintln!(
            "baton-sandbox-inner: baton's sandbox runs this program; it is not meant to be \
             run by hand"
        );
        2
    })
}
