//! The `idemgate` binary: see `idemgate --help`.

mod demo;

use idemgate_gateway::cli::Command;

/// jemalloc, with its background threads: they give the memory freed after a spike
/// (thousands of connections closing) back to the OS within about 20 s (its decay, 10 s by
/// default) even when the process is idle, which mimalloc (no thread of its own: it purges
/// only while allocating) and glibc's malloc did not; glibc's also costs more CPU per request
/// (docs/performance.md#memory). The `system-allocator` feature keeps the system's, for heap
/// profilers that intercept `malloc`.
#[cfg(all(not(target_env = "msvc"), not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    idemgate_gateway::main(async |command| match command {
        Command::DemoApi { listen } => {
            idemgate_demo::serve_api(listen, idemgate_gateway::shutdown_signal()).await
        }
        _ => idemgate_demo::run(demo::spawn_gateway).await,
    })
    .await
}
