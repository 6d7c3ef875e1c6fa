//! The wiring, and the lifecycle of one server instance: start (connect, migrate, load
//! scripts, build every feature's context), serve, shut down. Nothing imports this layer.
//!
//! Shutdown follows mini-redis: one [`CancellationToken`] that every task listens to, and a
//! [`TaskTracker`] to wait for background tasks once they have been told to stop. Before
//! it, a drain window ([`App::serve`]): the instance reports itself not ready while it
//! still serves, so a load balancer stops sending it clients before it refuses any.

pub mod allocator;
pub(crate) mod background;
pub mod cli;
pub mod demo;
pub mod settings;

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    api::http::{
        self, caps::Caps, rate_limit::RateLimits, trusted::TrustedDocuments, validated::Schemas,
        Gateway,
    },
    app::settings::Settings,
    features::Features,
    infra::{
        auth::Tokens,
        clock::Clock,
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
    pub config: Settings,
    pub infra: Infra,
    pub features: Features,
    pub gateway: Arc<Gateway>,
}

pub type AppState = Arc<Services>;

impl Services {
    /// Connects to Redis and SQL, applies migrations, loads the Lua scripts and builds every
    /// feature's context.
    pub async fn start(config: Settings) -> anyhow::Result<AppState> {
        if config.uses_dev_secret() {
            tracing::warn!(
                "!!! Neither ENGAGE_JWT_SECRET nor ENGAGE_JWT_JWKS_URL is set: using the \
                 development secret. Anyone can mint tokens for this server. Set one of them \
                 (and ENGAGE_ENV=production) before exposing it. !!!"
            );
        }
        if config.is_production() && config.jwt_jwks_url.is_some() && config.jwt_audience.is_none()
        {
            tracing::warn!(
                "ENGAGE_JWT_AUDIENCE is not set: tokens the identity provider issued for other \
                 applications are accepted too"
            );
        }
        // Before anything connects: a bad manifest is a deploy mistake to report at once.
        let trusted = TrustedDocuments::load(
            config.trusted_documents.as_deref(),
            config.trusted_documents_only,
        )?;
        let tally = redis_access::counting::Tally::default();
        let target = RedisTarget::new(
            &config.redis_url,
            config.redis_mode,
            config.redis_ca_file.as_deref(),
        )?;
        let redis = redis_access::connect(&target, tally.clone()).await?;
        redis_access::scripts::load_all(&redis).await?;
        let db = Db::connect(&config.database_url).await?;
        db.migrate().await?;

        let keys = Keys::new(config.redis_prefix.clone())
            .on_cluster(target.is_cluster())
            .with_points_buckets(config.points.buckets(config.redis_mode));
        let clock = Clock::new(config.timezone);
        #[cfg(feature = "test-clock")]
        clock.start_from_env()?;
        let ids = IdGenerator::new(
            redis.clone(),
            keys.clone(),
            clock.clone(),
            config.id_block_size,
        );
        let shutdown = CancellationToken::new();
        let infra = Infra {
            redis,
            redis_round_trips: tally.round_trips,
            redis_commands: tally.commands,
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
                draining: shutdown.child_token(),
                shutdown,
                tasks: TaskTracker::new(),
                scraped: Default::default(),
                open: Default::default(),
            },
        };
        let features = Features::new(&infra, config.features())?;
        let gateway = Arc::new(Gateway {
            config: config.infra.clone(),
            infra: infra.clone(),
            tokens: Tokens::from_config(&config).await,
            rate_limits: RateLimits::new(config.rate_limit_per_ip, config.rate_limit_per_user)
                .with_probes(config.probe_rate_per_ip)
                .with_registrations(config.apq_register_bytes_per_ip_per_minute),
            websockets_per_user: Caps::new(config.ws_max_per_user, "websockets_per_user"),
            trusted,
            users: features.users.clone(),
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
    pub(crate) schemas: Schemas,
    listener: TcpListener,
    /// `ENGAGE_METRICS_BIND`'s, when metrics have an address of their own.
    metrics_listener: Option<TcpListener>,
}

impl App {
    pub async fn start(config: Settings) -> anyhow::Result<Self> {
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
        let schemas = Schemas::build(&state.config.infra, &state.infra, &state.features);
        crate::app::background::spawn_all(&state);
        Ok(Self {
            state,
            schemas,
            listener,
            metrics_listener,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `stop` resolves, then drains and stops, in this order:
    ///
    /// 1. `stop` resolves (SIGTERM): the instance is draining. `/readyz` answers 503 at once
    ///    and every response carries `Connection: close`, so keep-alive clients come back
    ///    through the load balancer, which by then sends them elsewhere. Everything else goes
    ///    on: requests and WebSockets are served, background tasks finish the work in hand.
    /// 2. `ENGAGE_DRAIN_SECONDS` later, the shutdown: the listener closes, each connection
    ///    closes once its request in flight is answered, WebSockets close with 1001 (going
    ///    away) and background tasks stop.
    /// 3. It returns once all of that is done, or `ENGAGE_SHUTDOWN_GRACE_SECONDS` after the
    ///    shutdown began with work still running.
    ///
    /// Cancelling `instance.shutdown` directly skips the window (a second signal does so).
    pub async fn serve(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Self {
            state,
            schemas,
            listener,
            metrics_listener,
        } = self;
        let instance = state.infra.instance.clone();
        if let Some(metrics_listener) = metrics_listener {
            let router = http::metrics_router(state.gateway.clone(), schemas.clone());
            let stopped = instance.shutdown.clone().cancelled_owned();
            instance.spawn("metrics-listener", async move {
                // With the peer's address: the scrapes are rate-limited per client IP.
                let router = router.into_make_service_with_connect_info::<SocketAddr>();
                let served = axum::serve(metrics_listener, router)
                    .with_graceful_shutdown(stopped)
                    .await;
                if let Err(error) = served {
                    tracing::error!(%error, "the metrics listener stopped");
                }
            });
        }
        let router = http::router(state.gateway.clone(), schemas);
        // The bench route gets the one feature it drives, not a field on the gateway.
        #[cfg(feature = "bench")]
        let router = router.merge(http::bench::router(
            state.gateway.clone(),
            state.features.remarks.clone(),
        ));
        tokio::spawn(drain(stop, instance.clone(), state.config.drain_window()));

        let config = &state.config;
        let limits = http::server::Limits {
            max_connections: http::server::connection_cap(config.max_connections),
            max_connections_per_ip: config.max_connections_per_ip,
            header_read_timeout: Duration::from_secs(config.header_read_timeout_seconds),
            body_read_timeout: Duration::from_secs(config.body_read_timeout_seconds),
            max_header_bytes: config.max_header_bytes,
            trusted_proxy_hops: config.trust_proxy.then_some(config.trusted_proxy_hops),
        };
        let server = http::server::serve(
            listener,
            router,
            limits,
            Arc::new(http::edge::Cors::from_config(config)),
            instance.draining.clone(),
            instance.shutdown.clone(),
        );

        let grace = state.config.shutdown_grace();
        let served = async {
            server.await;
            instance.tasks.close();
            instance.tasks.wait().await;
            // Ends the sessions (and any transaction a stopped task left open).
            state.infra.db.pool.close().await;
            anyhow::Ok(())
        };
        tokio::select! {
            result = served => result,
            () = async { instance.shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
                tracing::warn!("shutdown grace period over: stopping with work still running");
                Ok(())
            }
        }
    }
}

/// The drain window of [`App::serve`]: from `stop` to the shutdown.
///
/// Background tasks keep running through the window rather than stopping with the
/// listener's first refusal: the requests still served need the archive, the jobs and the
/// live hub behind them, and a stream consumer that stopped early would hand its leases
/// over while this instance still writes to its streams.
async fn drain(stop: impl Future<Output = ()>, instance: Instance, window: Duration) {
    tokio::select! {
        () = stop => {}
        () = instance.shutdown.cancelled() => return,
    }
    instance.draining.cancel();
    tracing::info!(
        seconds = window.as_secs(),
        "draining: /readyz answers 503, requests are still served until the window ends"
    );
    tokio::select! {
        () = tokio::time::sleep(window) => {}
        () = instance.shutdown.cancelled() => {}
    }
    tracing::info!("shutting down: no new connections, finishing in-flight requests");
    instance.shutdown.cancel();
}

/// What `engage serve` stops on: resolves on the first Ctrl-C or SIGTERM, which begins the
/// drain; a second one cancels `shutdown`, ending the drain window at once (a person at a
/// terminal need not wait it out; a supervisor sends one signal and waits).
pub(crate) async fn termination(shutdown: CancellationToken) {
    shutdown_signal().await;
    tokio::spawn(async move {
        shutdown_signal().await;
        shutdown.cancel();
    });
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
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
}
