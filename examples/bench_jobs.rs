//! Delay-queue benchmark, in process against the real Redis: N jobs all due in the same
//! second, a no-op handler; reports how fast they are promoted and delivered and how late
//! each delivery was relative to its due time. Optionally spread over many topics, with
//! priorities and a concurrency limit per topic, so that the take script's choices are paid
//! for too.
//!
//! ```sh
//! cargo run --release --example bench_jobs -- --jobs 50000
//! cargo run --release --example bench_jobs -- --jobs 100000 --topics 1000 --priorities \
//!     --topic-concurrency 4 --repeating
//! ```

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use clap::Parser;
use engage::{
    app::{cli::Cli, App},
    features::jobs::{handlers::Delivery, repeat::RepeatRule, JobError, JobHandler, NewJob},
};

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 50_000)]
    jobs: usize,
    /// Seconds from now at which every job is due (longer than scheduling them takes).
    #[arg(long, default_value_t = 10)]
    due_in: u64,
    /// Jobs run at once (ENGAGE_JOBS_CONCURRENCY); the server's default when left out.
    #[arg(long)]
    concurrency: Option<usize>,
    /// Topics the jobs are spread over, round robin.
    #[arg(long, default_value_t = 1)]
    topics: usize,
    /// Jobs get priorities 0 to 1000 (spread evenly) instead of all 0.
    #[arg(long)]
    priorities: bool,
    /// Each topic's concurrency limit (`setTopicLimits`); none when left out.
    #[arg(long)]
    topic_concurrency: Option<i32>,
    /// Each job repeats hourly: its first run is measured, and ending it schedules the next
    /// in the same script.
    #[arg(long)]
    repeating: bool,
}

impl Args {
    fn topic(&self, n: usize) -> String {
        format!("bench-{}", n % self.topics.max(1))
    }

    fn scenario(&self) -> String {
        let mut parts = Vec::new();
        if self.topics > 1 {
            parts.push(format!("{} topics", self.topics));
        }
        if self.priorities {
            parts.push("priorities".to_string());
        }
        if let Some(limit) = self.topic_concurrency {
            parts.push(format!("concurrency {limit} per topic"));
        }
        if self.repeating {
            parts.push("repeating".to_string());
        }
        if parts.is_empty() {
            "delay queue".into()
        } else {
            format!("delay queue ({})", parts.join(", "))
        }
    }
}

struct Lateness(Arc<Mutex<Vec<(i64, i64)>>>);

#[async_trait::async_trait]
impl JobHandler for Lateness {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        let now = chrono::Utc::now().timestamp_millis();
        self.0
            .lock()
            .unwrap()
            .push((now, now - delivery.spec.run_at_ms));
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("engage-bench-jobs-{}", std::process::id()));
    let mut config = Cli::try_parse_from(["engage"])?.config;
    config.bind = "127.0.0.1:0".parse()?;
    config.database_url = format!("sqlite://{}/bench.db", dir.display());
    config.redis_prefix = format!("bench-jobs-{}:", std::process::id());
    if let Some(concurrency) = args.concurrency {
        config.jobs.jobs_concurrency = concurrency;
    }
    let concurrency = config.jobs.jobs_concurrency;
    let redis_url = config.redis_url.clone();
    let app = App::start(config).await?;
    let state = app.state.clone();
    let seen = Arc::new(Mutex::new(Vec::with_capacity(args.jobs)));
    let handler = Arc::new(Lateness(seen.clone()));
    for n in 0..args.topics.max(1) {
        let topic = args.topic(n);
        state
            .features
            .jobs
            .registry
            .register(&topic, handler.clone(), None);
        if let Some(limit) = args.topic_concurrency {
            state
                .features
                .jobs
                .set_limits(&topic, None, Some(limit))
                .await?;
        }
    }
    let args = Arc::new(args);

    let scheduling = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|worker| {
            let (state, args) = (state.clone(), args.clone());
            let count = args.jobs / 8 + usize::from(worker < args.jobs % 8);
            // One due time for all, however long scheduling takes.
            let due_at = scheduling + Duration::from_secs(args.due_in);
            tokio::spawn(async move {
                for i in 0..count {
                    let n = i * 8 + worker;
                    let delay = due_at.saturating_duration_since(Instant::now());
                    let job = NewJob {
                        priority: if args.priorities {
                            (n % 1001) as u32
                        } else {
                            0
                        },
                        repeat: args.repeating.then(|| RepeatRule {
                            every_seconds: Some(3600),
                            ..RepeatRule::default()
                        }),
                        ..NewJob::new(format!("w{worker}-{i}"), args.topic(n), "{}".into(), delay)
                    };
                    state.features.jobs.schedule(job).await.expect("scheduled");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    println!(
        "scheduled {} jobs in {:.2}s",
        args.jobs,
        scheduling.elapsed().as_secs_f64()
    );
    // Jobs that came due while others were still being scheduled were not due together:
    // the figures would measure scheduling, not promotion.
    anyhow::ensure!(
        scheduling.elapsed() < Duration::from_secs(args.due_in),
        "scheduling took longer than --due-in {}s: raise it",
        args.due_in
    );

    // The work of the delivery alone: this process's CPU (the server's, whose handler does
    // nothing) and Redis's, from just before the jobs come due until the last ran.
    let due_at = scheduling + Duration::from_secs(args.due_in);
    tokio::time::sleep_until(
        due_at
            .checked_sub(Duration::from_millis(50))
            .unwrap_or(due_at)
            .into(),
    )
    .await;
    let mut redis = redis::Client::open(redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let before = (process_cpu_ms()?, RedisWork::read(&mut redis).await?);
    let deadline = Instant::now() + Duration::from_secs(args.due_in + 120);
    while seen.lock().unwrap().len() < args.jobs && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = (process_cpu_ms()?, RedisWork::read(&mut redis).await?);
    let mut seen = seen.lock().unwrap().clone();
    anyhow::ensure!(
        seen.len() == args.jobs,
        "only {} of {} delivered",
        seen.len(),
        args.jobs
    );
    let first = seen.iter().map(|(at, _)| *at).min().unwrap_or(0);
    let last = seen.iter().map(|(at, _)| *at).max().unwrap_or(0);
    seen.sort_by_key(|(_, late)| *late);
    let at = |p: f64| seen[((seen.len() as f64 * p) as usize).min(seen.len() - 1)].1;
    println!(
        "RESULT {}",
        serde_json::json!({
            "scenario": args.scenario(),
            "jobs": seen.len(),
            "concurrency": concurrency,
            "delivered_over_ms": last - first,
            "jobs_per_s": (seen.len() as f64 / ((last - first).max(1) as f64 / 1000.0)).round(),
            "lateness_p50_ms": at(0.5),
            "lateness_p99_ms": at(0.99),
            "lateness_max_ms": seen.last().map_or(0, |(_, late)| *late),
            "process_cpu_ms": after.0 - before.0,
            "redis_cpu_ms": after.1.cpu_ms - before.1.cpu_ms,
            "evalsha_calls": after.1.evalsha_calls - before.1.evalsha_calls,
            "evalsha_ms": (after.1.evalsha_us - before.1.evalsha_us) / 1000,
        })
    );

    support::stop_and_unlink_keys(&state).await?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

/// CPU time of this process so far, ms (user and system, from /proc).
fn process_cpu_ms() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // The fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks of 10 ms.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok(ticks.iter().sum::<u64>() * 10)
}

/// What Redis has done so far: its CPU, and its script calls with their time.
struct RedisWork {
    cpu_ms: i64,
    evalsha_calls: i64,
    evalsha_us: i64,
}

impl RedisWork {
    async fn read(redis: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<Self> {
        let info: String = redis::cmd("INFO").arg("all").query_async(redis).await?;
        let field = |line: &str, name: &str| -> f64 {
            line.split([',', ':'])
                .find_map(|part| part.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(0.0)
        };
        let mut work = Self {
            cpu_ms: 0,
            evalsha_calls: 0,
            evalsha_us: 0,
        };
        for line in info.lines() {
            if let Some(seconds) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                work.cpu_ms += (seconds.trim().parse::<f64>().unwrap_or(0.0) * 1000.0) as i64;
            } else if line.starts_with("cmdstat_evalsha:") {
                work.evalsha_calls = field(line, "calls") as i64;
                work.evalsha_us = field(line, "usec") as i64;
            }
        }
        Ok(work)
    }
}
