//! The `baton` binary: a thin shell over `baton::cli`.

// No Rust runtime set-up, as in baton-sandbox-inner: glibc finds the main thread's stack for
// the runtime's overflow guard by reading and parsing /proc/self/maps, a tenth of the start-up
// of every `baton sandbox` command. What of that set-up baton relies on is done here.
#![no_main]

#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> i32 {
    // SAFETY: fcntl/open/signal on this process's own descriptors and dispositions, before
    // any other code runs.
    unsafe {
        // Descriptors 0–2 closed by the caller would be handed to the next files opened (a
        // session file written through "stdout"): point them at /dev/null, as the runtime does.
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null != fd {
                    libc::abort();
                }
            }
        }
        // A closed pipe is an error for the writer (EPIPE), not a kill.
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    std::process::exit(baton::cli::main())
}
