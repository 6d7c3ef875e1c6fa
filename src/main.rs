use clap::Parser;

// glibc's malloc took a quarter of the CPU time of a remarks page in `perf` (GraphQL
// resolution allocates many small, short-lived values across threads); mimalloc's
// thread-local free lists take most of that back. BENCHMARKS.md has the before and after.
#[global_allocator]
static ALLOCATOR: engage::app::allocator::Mimalloc = engage::app::allocator::Mimalloc;

fn main() -> std::process::ExitCode {
    // `TOKIO_WORKER_THREADS` still sets the workers, as under `#[tokio::main]`.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(idle::return_freed_memory)
        .build()
        .expect("the runtime starts: it only needs threads and an epoll descriptor")
        .block_on(serve())
}

/// Giving freed memory back to the system once a worker has nothing to do.
///
/// mimalloc keeps the pages a thread freed until that thread collects, which it does only
/// every so many allocations: a worker that served a burst (1,500 connections' header
/// buffers: 40–60 MB) and then fell idle held those pages for ever. A worker that parks
/// collects its own heap, at most once a second, so that the pages it freed are purged
/// (after mimalloc's purge delay) while the instance is quiet. Purging at every free
/// (`purge_delay=0`) would give the memory back as fast, at the cost of a system call in
/// the request path whenever a page empties.
mod idle {
    use std::{
        cell::Cell,
        time::{Duration, Instant},
    };

    const EVERY: Duration = Duration::from_secs(1);

    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }

    pub fn return_freed_memory() {
        let now = Instant::now();
        let due = LAST
            .get()
            .is_none_or(|last| now.duration_since(last) >= EVERY);
        if due {
            LAST.set(Some(now));
            // SAFETY: collects the calling thread's own heap; it takes no pointer and is
            // safe to call at any time from any thread that allocates.
            unsafe { libmimalloc_sys::mi_collect(false) };
        }
    }
}

async fn serve() -> std::process::ExitCode {
    // A missing .env is normal; a malformed one is worth saying, through the logger once it
    // is installed (the log format may come from the .env itself).
    let dotenv = dotenvy::dotenv().err().filter(|error| !error.not_found());
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

    if let Some(error) = dotenv {
        tracing::warn!("engage: ignoring .env: {error}");
    }
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
