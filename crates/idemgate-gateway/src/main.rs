//! The `idemgate` binary: see `idemgate --help`.

mod demo;

use idemgate_gateway::cli::Command;

/// mimalloc instead of the system allocator: a request allocates and frees many small
/// buffers (header maps, body chunks, futures) across threads, where glibc's malloc spent
/// about a tenth of the gateway's CPU in the side-by-side benchmark. The `system-allocator`
/// feature keeps glibc's, for heap profilers that intercept `malloc`.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
