use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::EnvFilter;

// glibc's malloc took a quarter of the CPU time of a remarks page in `perf` (GraphQL
// resolution allocates many small, short-lived values across threads); mimalloc's
// thread-local free lists take most of that back. BENCHMARKS.md has the before and after.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // A missing .env is normal; a malformed one is worth saying.
    if let Err(error) = dotenvy::dotenv() {
        if !error.not_found() {
            eprintln!("engage: ignoring .env: {error}");
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("engage=info,tower_http=warn")),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a file or a collector.
        .with_ansi(std::io::stderr().is_terminal())
        .init();

    let cli = engage::app::cli::Cli::parse();
    match engage::app::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("engage: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
