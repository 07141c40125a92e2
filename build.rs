//! Link options for baton's programs: their relative relocations packed (`DT_RELR`) where the
//! toolchain and C library of this machine support it.
//!
//! baton is a position-independent executable with ~60,000 relative relocations, which the
//! dynamic loader applies on every start (every `baton sandbox -- CMD` pays it). The packed
//! form is a bitmap a few kilobytes long instead of a 1.4 MB table of 24-byte entries: less
//! to read from the page cache and a shorter loop, and ASLR is kept. A program linked this way
//! needs glibc 2.36 or newer, so the option is used only where a probe program linked with
//! it runs here (a native build); anywhere else the link stays as it was.

// A build script talks to cargo on stdout.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BATON_NO_RELR");
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    if target != host
        || !target.contains("linux-gnu")
        || std::env::var_os("BATON_NO_RELR").is_some()
    {
        return;
    }
    if relr_links_and_runs() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether a small PIE with a relative relocation, linked with `-z pack-relative-relocs`,
/// links without a warning and runs on this machine.
fn relr_links_and_runs() -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let src = out.join("relr_probe.c");
    let exe = out.join("relr_probe");
    let program = "static const char *names[] = {\"a\", \"b\"};\n\
                   int main(void) { return names[1][0] == 'b' ? 0 : 1; }\n";
    if std::fs::write(&src, program).is_err() {
        return false;
    }
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let Ok(linked) = Command::new(cc)
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
    else {
        return false;
    };
    // An older linker ignores an unknown `-z` option with a warning: nothing gained then.
    if !linked.status.success() || !linked.stderr.is_empty() {
        return false;
    }
    Command::new(&exe)
        .output()
        .is_ok_and(|run| run.status.success())
}
