//! The wiring, and the lifecycle of one server instance: start (connect, migrate, load
//! scripts, build every feature's context), serve, shut down. Nothing imports this layer.
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
    api::{
        http::{self, rate_limit::RateLimits, Gateway},
        schema::{self, AppSchema},
    },
    features::Features,
    infra::{
        auth::Tokens,
        clock::Clock,
        config::Config,
        db::Db,
        ids::IdGenerator,
        live::LiveHub,
        redis::{self as redis_access, durability::Durability, Keys, RedisTarget},
        ConsumerTimings, Infra, Instance,
    },
};

/// One instance, wired: the infrastructure, every feature's context built on it, and what
/// the transports share. The wiring is the only code that sees all three; everything else
/// receives the part it uses.
pub struct Services {
    pub config: Config,
    pub infra: Infra,
    pub features: Features,
    pub gateway: Arc<Gateway>,
}

pub type AppState = Arc<Services>;

impl Services {
    /// Connects to Redis and SQL, applies migrations, loads the Lua scripts and builds every
    /// feature's context.
    pub async fn start(config: Config) -> anyhow::Result<AppState> {
        if config.uses_dev_secret() {
            tracing::warn!(
                "!!! ENGAGE_JWT_SECRET is not set: using the development secret. Anyone can \
                 mint tokens for this server. Set ENGAGE_JWT_SECRET before exposing it. !!!"
            );
        }
        let redis_round_trips = Arc::new(AtomicU64::new(0));
        let target = RedisTarget::new(
            &config.redis_url,
            config.redis_mode,
            config.redis_ca_file.as_deref(),
        )?;
        let redis = redis_access::connect(&target, redis_round_trips.clone()).await?;
        redis_access::scripts::load_all(&redis).await?;
        let db = Db::connect(&config.database_url).await?;
        db.migrate().await?;

        let keys = Keys::new(config.redis_prefix.clone())
            .on_cluster(target.is_cluster())
            .with_points_buckets(config.points_buckets());
        let clock = Clock::new(config.timezone);
        let ids = IdGenerator::new(
            redis.clone(),
            keys.clone(),
            clock.clone(),
            config.id_block_size,
        );
        let infra = Infra {
            redis,
            redis_round_trips,
            db,
            keys,
            clock,
            ids: Arc::new(ids),
            live: LiveHub::new(target.clone()),
            durability: Arc::new(Durability::new(
                config.redis_wait_replicas,
                Duration::from_millis(config.redis_wait_timeout_ms),
                config.redis_wait_writes.clone(),
            )),
            instance: Instance {
                id: format!("engage-{}", uuid::Uuid::new_v4().simple()).into(),
                redis: target,
                consumers: ConsumerTimings {
                    claim_idle: Duration::from_millis(config.consumer_claim_idle_ms.max(10)),
                    max_backoff: Duration::from_millis(config.consumer_max_backoff_ms.max(10)),
                    archive_linger: Duration::from_millis(config.archive_linger_ms),
                },
                shutdown: CancellationToken::new(),
                tasks: TaskTracker::new(),
                scraped: Default::default(),
            },
        };
        let features = Features::new(&infra, &config)?;
        let gateway = Arc::new(Gateway {
            config: config.clone(),
            infra: infra.clone(),
            tokens: Tokens::new(config.jwt_secret()).with_max_ttl(config.jwt_max_ttl_seconds),
            rate_limits: RateLimits::new(config.rate_limit_per_ip, config.rate_limit_per_user),
            users: features.users.clone(),
            remarks: features.remarks.clone(),
        });
        Ok(Arc::new(Services {
            config,
            infra,
            features,
            gateway,
        }))
    }
}

/// A started instance: its state, schema and listening sockets.
pub struct App {
    pub state: AppState,
    pub schema: AppSchema,
    listener: TcpListener,
    /// `ENGAGE_METRICS_BIND`'s, when metrics have an address of their own.
    metrics_listener: Option<TcpListener>,
}

impl App {
    pub async fn start(config: Config) -> anyhow::Result<Self> {
        config.check()?;
        let listener = TcpListener::bind(config.bind)
            .await
            .with_context(|| format!("cannot listen on {}", config.bind))?;
        let metrics_listener =
            match config.metrics_bind {
                Some(address) => Some(TcpListener::bind(address).await.with_context(|| {
                    format!("cannot listen on {address} (ENGAGE_METRICS_BIND)")
                })?),
                None => None,
            };
        let state = Services::start(config).await?;
        let schema = schema::build(Some((&state.config, &state.infra, &state.features)));
        crate::app::background::spawn_all(&state);
        Ok(Self {
            state,
            schema,
            listener,
            metrics_listener,
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
            metrics_listener,
        } = self;
        let shutdown = state.infra.instance.shutdown.clone();
        if let Some(metrics_listener) = metrics_listener {
            let router = http::metrics_router(state.gateway.clone(), schema.clone());
            let stopped = shutdown.clone().cancelled_owned();
            state.infra.instance.spawn("metrics-listener", async move {
                let served = axum::serve(metrics_listener, router)
                    .with_graceful_shutdown(stopped)
                    .await;
                if let Err(error) = served {
                    tracing::error!(%error, "the metrics listener stopped");
                }
            });
        }
        let router = http::router(state.gateway.clone(), schema);
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
            state.infra.instance.tasks.close();
            state.infra.instance.tasks.wait().await;
            // Ends the sessions (and any transaction a stopped task left open).
            state.infra.db.pool.close().await;
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
