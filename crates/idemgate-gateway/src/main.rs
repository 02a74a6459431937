//! The `idemgate` binary: see `idemgate --help`.

/// mimalloc instead of the system allocator: a request allocates and frees many small
/// buffers (header maps, body chunks, futures) across threads, where glibc's malloc spent
/// about a tenth of the gateway's CPU in the side-by-side benchmark.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    idemgate_gateway::main().await
}
