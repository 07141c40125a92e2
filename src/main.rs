//! The `baton` binary: a thin shell over `baton::cli`.

fn main() {
    std::process::exit(baton::cli::main());
}
