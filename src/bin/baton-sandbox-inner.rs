//! The sandbox's inner helper as a program of its own, installed beside `baton`: bubblewrap
//! execs it for every sandboxed command, and a small binary starts in a fraction of the time
//! the whole agent takes to load (see `baton::sandbox::inner`).

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let code = baton::sandbox::inner::run_if_requested(&argv).unwrap_or_else(|| {
        eprintln!(
            "baton-sandbox-inner: baton's sandbox runs this program; it is not meant to be \
             run by hand"
        );
        2
    });
    std::process::exit(code);
}
