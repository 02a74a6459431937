//! The `idemgate` binary: see `idemgate --help`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    idemgate_gateway::main().await
}
