//! The `concord` binary.

fn main() -> std::process::ExitCode {
    concord::cli::main_with(std::env::args_os())
}
