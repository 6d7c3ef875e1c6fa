//! The shared state every handler, resolver and worker receives, and the lifecycle of one
//! server instance: start (connect, migrate, load scripts), serve, shut down.
//!
//! Shutdown follows mini-redis: one [`CancellationToken`] that every task listens to, and a
//! [`TaskTracker`] to wait for background tasks once they have been told to stop.

pub mod background;
pub mod cli;
pub mod demo;

use std::{
    future::Future,
    net::SocketAddr,
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    api::http::{self, rate_limit::RateLimits},
    api::schema::{self, AppSchema},
    features::jobs::JobRegistry,
    features::leaderboard::live::SharedBoards,
    features::points::PointsSettings,
    features::remarks::RemarkSettings,
    features::users::UserDirectory,
    infra::auth::Tokens,
    infra::clock::Clock,
    infra::config::Config,
    infra::db::Db,
    infra::ids::IdGenerator,
    infra::live::LiveHub,
    infra::redis::{self as redis_access, Keys, RedisPool},
};

/// Everything a request or a worker needs, built once per instance.
pub struct Services {
    pub config: Config,
    pub redis: RedisPool,
    /// Round trips made through `redis` (metrics, and tests that count them).
    pub redis_round_trips: Arc<AtomicU64>,
    pub db: Db,
    pub keys: Keys,
    pub clock: Clock,
    pub ids: IdGenerator,
    pub tokens: Tokens,
    pub users: Arc<UserDirectory>,
    pub rate_limits: RateLimits,
    /// Names this instance as a stream consumer and lock owner.
    pub instance_id: String,
    /// The one pub/sub connection of this instance, fanned out to subscriptions.
    pub live: Arc<LiveHub>,
    /// Leaderboard readers shared by the subscribers of this instance.
    pub boards: SharedBoards,
    pub remarks: RemarkSettings,
    pub points: PointsSettings,
    /// In-process handlers of delay-queue topics.
    pub jobs: JobRegistry,
    /// Cancelled when the instance begins to shut down.
    pub shutdown: CancellationToken,
    /// Background tasks, awaited on shutdown.
    pub tasks: TaskTracker,
}

pub type AppState = Arc<Services>;

impl Services {
    /// Connects to Redis and SQL, applies migrations and loads the Lua scripts.
    pub async fn start(config: Config) -> anyhow::Result<AppState> {
        if config.uses_dev_secret() {
            tracing::warn!(
                "!!! ENGAGE_JWT_SECRET is not set: using the development secret. Anyone can \
                 mint tokens for this server. Set ENGAGE_JWT_SECRET before exposing it. !!!"
            );
        }
        let redis_round_trips = Arc::new(AtomicU64::new(0));
        let redis = redis_access::connect(
            &config.redis_url,
            config.redis_mode,
            redis_round_trips.clone(),
        )
        .await?;
        redis_access::scripts::load_all(&redis).await?;
        let db = Db::connect(&config.database_url).await?;
        db.migrate().await?;

        let keys = Keys::new(config.redis_prefix.clone());
        let clock = Clock::new(config.timezone);
        let ids = IdGenerator::new(
            redis.clone(),
            keys.clone(),
            clock.clone(),
            config.id_block_size,
        );
        Ok(Arc::new(Services {
            tokens: Tokens::new(config.jwt_secret()).with_max_ttl(config.jwt_max_ttl_seconds),
            users: Arc::new(UserDirectory::new(db.clone())),
            rate_limits: RateLimits::new(config.rate_limit_per_ip, config.rate_limit_per_user),
            instance_id: format!("engage-{}", uuid::Uuid::new_v4().simple()),
            live: LiveHub::new(&config.redis_url),
            boards: SharedBoards::default(),
            remarks: RemarkSettings::from_config(&config),
            points: PointsSettings::from_config(&config)?,
            jobs: JobRegistry::from_config(&config),
            config,
            redis,
            redis_round_trips,
            db,
            keys,
            clock,
            ids,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }))
    }

    /// Runs a background loop until shutdown; `task` receives the shutdown token and must
    /// return soon after it is cancelled.
    pub fn spawn_background<F, Fut>(self: &Arc<Self>, name: &'static str, task: F)
    where
        F: FnOnce(AppState) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let future = task(self.clone());
        self.tasks.spawn(async move {
            future.await;
            tracing::debug!(task = name, "background task stopped");
        });
    }
}

/// A started instance: its state, schema and listening socket.
pub struct App {
    pub state: AppState,
    pub schema: AppSchema,
    listener: TcpListener,
}

impl App {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        config.check()?;
        let listener = TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("cannot listen on {}", config.bind))?;
        let state = Services::start(config).await?;
        let schema = schema::build(Some(state.clone()));
        crate::app::background::spawn_all(&state);
        Ok(Self {
            state,
            schema,
            listener,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `stop` resolves, then stops accepting, lets in-flight requests finish,
    /// closes WebSockets with 1001 and waits for background tasks (up to the grace period).
    pub async fn serve(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Self {
            state,
            schema,
            listener,
        } = self;
        let router = http::router(state.clone(), schema);
        let shutdown = state.shutdown.clone();
        let trigger = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = stop => trigger.cancel(),
                () = trigger.cancelled() => {}
            }
        });

        let limits = http::server::Limits {
            max_connections: http::server::connection_cap(state.config.max_connections),
            header_read_timeout: Duration::from_secs(state.config.header_read_timeout_seconds),
        };
        let server = http::server::serve(listener, router, limits, shutdown.clone());

        let grace = state.config.shutdown_grace();
        let served = async {
            server.await;
            state.tasks.close();
            state.tasks.wait().await;
            // Ends the sessions (and any transaction a stopped task left open).
            state.db.pool.close().await;
            anyhow::Ok(())
        };
        tokio::select! {
            result = served => result,
            () = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!("shutdown grace period over: stopping with work still running");
                Ok(())
            }
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
