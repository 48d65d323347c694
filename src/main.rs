//! The `concord` binary.

/// The binary's allocator. A training step and every message of the process runtime allocate
/// buffers of a model's size; the system allocator hands such large buffers back to the kernel
/// when they are freed, so each new one is faulted in again page by page (on a 7 MB model that
/// was a third of a `--runtime process` iteration). mimalloc keeps them for reuse.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    concord::cli::main_with(std::env::args_os())
}
