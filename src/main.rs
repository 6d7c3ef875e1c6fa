use clap::Parser;

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
    let cli = engage::app::cli::Cli::parse();
    // Flushes the spans not yet exported when dropped, after the last request.
    let json = cli.config.log_format == engage::infra::telemetry::LogFormat::Json;
    let _telemetry = match engage::infra::telemetry::init(cli.config.log_format) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("engage: {error:#}");
            return std::process::ExitCode::FAILURE;
        }
    };

    match engage::app::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            if json {
                tracing::error!("engage: {error:#}");
            } else {
                eprintln!("engage: {error:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}
