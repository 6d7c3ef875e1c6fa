//! The `engage` command line.

use clap::{Parser, Subcommand};

use crate::{
    api::schema,
    app::{self, settings::Settings, App, Services},
    infra::{
        auth::{Role, Tokens},
        db::Db,
    },
};

#[derive(Debug, Parser)]
#[command(
    name = "engage",
    version,
    about = "GraphQL backend for engagement features",
    // Every setting is accepted after a subcommand too (`engage serve --bind …`): said once
    // here for all of them, since clap has no `global` for a flattened group of settings.
    mut_args(|setting| setting.global(true))
)]
pub struct Cli {
    #[command(flatten)]
    pub config: Settings,

    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the API, the playground and the background workers (the default).
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Print a bearer token signed with the configured secret.
    Token {
        /// The user id the token speaks for.
        #[arg(long)]
        user: i64,
        #[arg(long, default_value = "user")]
        role: Role,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 30 * 24 * 3600)]
        ttl: i64,
        /// Display name given to the user when first seen.
        #[arg(long)]
        name: Option<String>,
    },
    /// Print the GraphQL SDL (what `schema.graphql` holds).
    Schema,
    /// Season maintenance.
    Season {
        #[command(subcommand)]
        command: SeasonCommand,
    },
    /// Compare every feature's Redis state with SQL and report drift (exit status 1 when any).
    Verify,
    /// Restore every feature's Redis state from SQL (idempotent; a stopped run resumes).
    Rebuild,
    /// Add demo users, items, remarks and likes.
    SeedDemo {
        /// How many users (each writes a remark and likes a few).
        #[arg(long, default_value_t = 40)]
        users: i64,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SeasonCommand {
    /// Copy a finished season's board to SQL (resumable), record its winners, unlink it.
    Archive {
        /// The season, `YYYYMM`.
        #[arg(long)]
        season: String,
    },
}

/// Where the instance answers, said through the logger (stderr, and one JSON object a line
/// with `ENGAGE_LOG_FORMAT=json`, so that a collector reads every line it writes). The
/// playground is named only where it is served.
fn banner(config: &Settings, address: std::net::SocketAddr) {
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        commit = env!("ENGAGE_COMMIT"),
        "engage is listening on http://{address} (GraphQL endpoint http://{address}/graphql)"
    );
    if config.playground_enabled() {
        tracing::info!("engage: playground at http://{address}/");
    }
    tracing::info!("engage: live dashboard at http://{address}/dashboard");
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = cli.config;
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let app = App::start(config).await?;
            let address = app.local_addr();
            banner(&app.state.config, address);
            let shutdown = app.state.infra.instance.shutdown.clone();
            app.serve(app::termination(shutdown)).await
        }
        Command::Migrate => {
            let db = Db::connect(&config.database_url).await?;
            db.migrate().await?;
            println!("migrations applied to {:?}", db.backend);
            Ok(())
        }
        Command::Token {
            user,
            role,
            ttl,
            name,
        } => {
            if user <= 0 {
                anyhow::bail!("--user must be a positive integer");
            }
            if config.uses_dev_secret() {
                eprintln!(
                    "warning: ENGAGE_JWT_SECRET is not set; signing with the development secret"
                );
            }
            let tokens = Tokens::signer(&config);
            if !tokens.can_mint() {
                anyhow::bail!(
                    "ENGAGE_JWT_SECRET is not set, so there is nothing to sign with: tokens come \
                     from the identity provider of ENGAGE_JWT_JWKS_URL, and production refuses \
                     the development secret"
                );
            }
            let token = tokens.mint(user, role, ttl, name);
            println!("{token}");
            Ok(())
        }
        Command::Schema => {
            print!("{}", schema::sdl());
            Ok(())
        }
        Command::Season {
            command: SeasonCommand::Archive { season },
        } => {
            let state = Services::start(config).await?;
            let season = crate::infra::clock::Month::parse_id(&season)
                .ok_or_else(|| anyhow::anyhow!("--season must be YYYYMM"))?;
            archive_with_progress(&state, season).await
        }
        Command::Verify => {
            let state = Services::start(config).await?;
            let reports = state
                .features
                .verify()
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut drifted = 0;
            for report in &reports {
                let verdict = if report.is_clean() { "ok" } else { "DRIFT" };
                println!(
                    "{:>22}: {} checked, {} drifted | {verdict}",
                    report.feature, report.checked, report.drifted
                );
                for example in &report.examples {
                    println!("{:>22}  - {example}", "");
                }
                drifted += usize::from(!report.is_clean());
            }
            if drifted > 0 {
                anyhow::bail!("{drifted} features drifted from SQL: run `engage rebuild`");
            }
            Ok(())
        }
        Command::Rebuild => {
            let state = Services::start(config).await?;
            let rebuilt = state
                .features
                .rebuild(&state.infra, true)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for feature in &rebuilt {
                println!(
                    "{:>22}: {} written in {:.2} s",
                    feature.feature,
                    feature.written,
                    feature.took.as_secs_f64()
                );
            }
            println!("rebuilt from SQL; `engage verify` compares again");
            Ok(())
        }
        Command::SeedDemo { users } => {
            let state = Services::start(config).await?;
            crate::app::demo::seed(&state, users).await
        }
    }
}

async fn archive_with_progress(
    state: &crate::app::AppState,
    season: crate::infra::clock::Month,
) -> anyhow::Result<()> {
    use crate::features::leaderboard::rollover::{Options, Progress};
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} season archive [{bar:40}] {pos}/{len} members",
        )?
        .progress_chars("=> "),
    );
    let report = |progress: Progress| {
        bar.set_length(progress.total.max(0) as u64);
        bar.set_position(progress.copied.max(0) as u64);
    };
    let options = Options {
        on_progress: Some(&report),
        stop_after_chunks: None,
        stop_after_payments: None,
    };
    match state
        .features
        .leaderboard
        .archive_season(season, options)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
    {
        Some(progress) => {
            bar.finish();
            println!(
                "season {} archived: {} members, board unlinked",
                season.id(),
                progress.total
            );
            Ok(())
        }
        None => anyhow::bail!(
            "another instance is archiving season {} right now",
            season.id()
        ),
    }
}
