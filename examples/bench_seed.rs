//! Fixtures for `bench/run`: items with remarks, a season board of a million members, an
//! empty board for `submitScore`, and files of bearer tokens that the wrk scenarios of
//! `bench/wrk/` read (one per line).
//!
//! ```sh
//! cargo run --release --example bench_seed -- --url http://127.0.0.1:8000/graphql \
//!     --prefix bench: --out /tmp/engage-bench
//! ```
//! Tokens are minted with `ENGAGE_JWT_SECRET` (or the development secret), as the server's.

use std::{fmt::Write as _, path::PathBuf, time::Instant};

use clap::Parser;
use engage::{
    features::{remarks::RemarkSettings, users::UserRecord},
    infra::{
        auth::Role,
        clock::Month,
        redis::{scripts::REMARKS_LIKE, Keys},
    },
};
use rand::Rng;
use serde_json::json;

#[path = "support/mod.rs"]
mod support;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "http://127.0.0.1:8000/graphql")]
    url: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The server's `ENGAGE_REDIS_PREFIX`.
    #[arg(long, default_value = "engage:")]
    prefix: String,
    /// Where the fixture files go.
    #[arg(long)]
    out: PathBuf,
    /// Remarks of each item; the likes spread over them all, the remarks page shows 20 of
    /// the first item's.
    #[arg(long, default_value_t = 100)]
    remarks: usize,
    /// Items with remarks.
    #[arg(long, default_value_t = 1)]
    items: usize,
    /// A second set of fixtures for a second server on the same data (the Node peer of
    /// `bench/peer`): the same items, remarks and board, with voters and users signing in of
    /// its own, so that each server's likes and sign-ins are new to it.
    #[arg(long)]
    peer_out: Option<PathBuf>,
    /// Distinct voters (also the viewers of the remarks page). The like scenarios never like
    /// a pair twice, and a full `bench/run` likes about two million times: 40,000 voters on
    /// 100 remarks make four million pairs.
    #[arg(long, default_value_t = 40_000)]
    voters: i64,
    /// Measured runs; each signs in users never seen before.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Fresh users per run for signIn (more than a run can sign in).
    #[arg(long, default_value_t = 100_000)]
    sign_ins_per_run: i64,
    /// Members of the current season's board.
    #[arg(long, default_value_t = 1_000_000)]
    members: usize,
    /// The server's `DATABASE_URL`: the board's members get their user rows there, as the
    /// members of a real board (who signed in to earn points) have.
    #[arg(long)]
    database_url: Option<String>,
    /// The server's `ENGAGE_POINTS_BUCKETS` (the parts the board is written to).
    #[arg(long, default_value_t = 1)]
    points_buckets: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out)?;
    let tokens = support::tokens();
    let client = reqwest::Client::new();
    let call = |token: String, query: &'static str, variables: serde_json::Value| {
        let (client, url) = (client.clone(), args.url.clone());
        async move { support::data(&client, &url, &token, query, variables).await }
    };
    let write = |name: &str, lines: &mut dyn Iterator<Item = String>| {
        let mut text = String::new();
        for line in lines {
            let _ = writeln!(text, "{line}");
        }
        std::fs::write(args.out.join(name), text)
    };
    // Users of different runs of the suite never meet: ids start from the clock.
    let base = 1_000_000_000 + (chrono::Utc::now().timestamp() % 1_000_000) * 10_000_000;

    let admin = tokens.mint(1, Role::Admin, 7200, None);
    let mut items = Vec::new();
    let mut remarks = Vec::new();
    for n in 0..args.items {
        let item = call(
            admin.clone(),
            "mutation($n: String!) { createItem(input: { name: $n }) { id } }",
            json!({ "n": format!("bench {n}") }),
        )
        .await?["createItem"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for remark in 0..args.remarks as i64 {
            let author = base + (n * args.remarks) as i64 + remark;
            let data = call(
                tokens.mint(author, Role::User, 7200, None),
                "mutation($i: CreateRemarkInput!) { createRemark(input: $i) { id } }",
                json!({ "i": { "itemId": item, "score": 5, "content": format!("bench remark {author}") } }),
            )
            .await?;
            remarks.push(
                data["createRemark"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        items.push(item);
    }
    let item = items[0].clone();
    // A board the scores go to: one per seed, so that every run starts from the same state.
    let board = format!("bench-steps-{base}");
    call(
        admin.clone(),
        "mutation($i: CreateBoardInput!) { createBoard(input: $i) { key } }",
        json!({ "i": { "key": board, "title": "Steps", "reset": "NEVER" } }),
    )
    .await?;
    write("board.txt", &mut std::iter::once(board))?;
    write(
        "service.txt",
        &mut std::iter::once(tokens.mint(2, Role::Service, 7200, None)),
    )?;
    let voters = base + 1_000_000;
    // The peer's users: voters and sign-ins of its own, in ranges of ids apart from these.
    let mut outs = vec![(args.out.clone(), voters, base + 2_000_000)];
    if let Some(peer) = &args.peer_out {
        std::fs::create_dir_all(peer)?;
        outs.push((peer.clone(), base + 3_000_000, base + 5_000_000));
    }
    for (out, voters, signing) in &outs {
        let write = |name: &str, lines: &mut dyn Iterator<Item = String>| {
            let mut text = String::new();
            for line in lines {
                let _ = writeln!(text, "{line}");
            }
            std::fs::write(out.join(name), text)
        };
        write("item.txt", &mut std::iter::once(item.clone()))?;
        write("remarks.txt", &mut remarks.iter().cloned())?;
        write(
            "voters.txt",
            &mut (0..args.voters).map(|v| tokens.mint(voters + v, Role::User, 7200, None)),
        )?;
        write(
            "viewer.txt",
            &mut std::iter::once(tokens.mint(*voters, Role::User, 7200, None)),
        )?;
        // Run 0 is the warm-up.
        for run in 0..=args.runs as i64 {
            let first = signing + run * args.sign_ins_per_run;
            write(
                &format!("signin-{run}.txt"),
                &mut (0..args.sign_ins_per_run)
                    .map(|u| tokens.mint(first + u, Role::User, 7200, None)),
            )?;
        }
    }

    // The board: one signIn makes the current season known, then members go in directly.
    let season = call(
        tokens.mint(voters, Role::User, 7200, None),
        "{ leaderboard(first: 1) { season { id } } }",
        json!({}),
    )
    .await?["leaderboard"]["season"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let season = Month::parse_id(&support::local_part(&season)?)
        .ok_or_else(|| anyhow::anyhow!("the server answered season {season:?}"))?;
    let keys = Keys::new(args.prefix.clone()).with_points_buckets(args.points_buckets);
    let mut conn = redis::Client::open(args.redis.as_str())?
        .get_multiplexed_async_connection_with_config(&support::patient_redis())
        .await?;
    let filling = Instant::now();
    let mut rng = rand::rng();
    for chunk in (0..args.members).step_by(10_000) {
        let mut pipe = redis::pipe();
        for member in chunk..(chunk + 10_000).min(args.members) {
            let points: u64 = rng.random_range(1..5_000);
            let tie: u64 = rng.random_range(0..2_678_400);
            let score = points as f64 * 4_194_304.0 + (4_194_303 - tie) as f64;
            let user = 4_000_000_000_i64 + member as i64;
            pipe.cmd("ZADD")
                .arg(keys.season_board_of(season, user))
                .arg(score)
                .arg(user)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await?;
    }
    let mut sizes = redis::pipe();
    for part in keys.season_board_parts(season) {
        sizes.cmd("ZCARD").arg(part);
    }
    let members: usize = sizes
        .query_async::<Vec<usize>>(&mut conn)
        .await?
        .into_iter()
        .sum();
    let board = keys.season_board_parts(season).join(",");
    if let Some(url) = &args.database_url {
        member_rows(url, &args.prefix, &mut conn, args.members).await?;
    }
    for (out, _, _) in &outs {
        std::fs::write(out.join("members.txt"), format!("{members}\n"))?;
    }
    write(
        "like_script.txt",
        &mut std::iter::once(like_script_call(&args, &remarks[0])?),
    )?;
    println!(
        "seeded {}: {} items, {} remarks, {} voters, {} runs of {} sign-ins, board {board} with {members} members ({:.1}s)",
        args.out.display(),
        items.len(),
        remarks.len(),
        args.voters,
        args.runs,
        args.sign_ins_per_run,
        filling.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A user row for each member of the board (`4_000_000_000 + n`), in multi-row inserts, and
/// their names in Redis, where a user's first sight puts them.
async fn member_rows(
    url: &str,
    prefix: &str,
    conn: &mut redis::aio::MultiplexedConnection,
    members: usize,
) -> anyhow::Result<()> {
    let db = engage::infra::db::Db::connect(url).await?;
    let keys = Keys::new(prefix);
    let now = chrono::Utc::now().timestamp_millis();
    const ROWS: usize = 300;
    let mut tx = db.pool.begin().await?;
    for (n, chunk) in (0..members).step_by(ROWS).enumerate() {
        if n % 100 == 99 {
            tx.commit().await?;
            tx = db.pool.begin().await?;
        }
        let ids: Vec<i64> = (chunk..(chunk + ROWS).min(members))
            .map(|member| 4_000_000_000_i64 + member as i64)
            .collect();
        let sql = format!(
            "INSERT INTO users (id, name, created_at_ms) VALUES {} ON CONFLICT (id) DO NOTHING",
            engage::infra::db::values_placeholders(db.backend, ids.len(), 3)
        );
        let mut insert = sqlx::query(&sql);
        let mut names = redis::pipe();
        for &id in &ids {
            let user = UserRecord {
                id,
                name: format!("member {id}"),
                avatar_url: None,
                bio: None,
            };
            names.hset(keys.user_names(id), id, user.card()).ignore();
            insert = insert.bind(id).bind(user.name).bind(now);
        }
        insert.execute(&mut *tx).await?;
        let () = names.query_async(&mut *conn).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The like script as `likeRemark` calls it, for redis-benchmark: every like by a random
/// voter (`__rand_int__`) on one remark, with the server's keys and default settings.
fn like_script_call(args: &Args, remark: &str) -> anyhow::Result<String> {
    let config = engage::app::cli::Cli::try_parse_from(["engage"])?.config;
    let settings: RemarkSettings = config.remarks.clone().for_redis(config.redis_mode);
    let keys = Keys::new(args.prefix.clone());
    let remark: i64 = support::local_id(remark)?;
    let shards = settings.shards();
    Ok([
        "EVALSHA".to_string(),
        REMARKS_LIKE.hash().to_string(),
        "4".into(),
        keys.remark_info(remark, shards),
        keys.like_relation(remark, 0, shards)
            .replace(":voter:0", ":voter:__rand_int__"),
        keys.remark_likers(remark, shards),
        keys.vote_stream_of(remark, shards),
        "__rand_int__".into(),
        remark.to_string(),
        chrono::Utc::now().timestamp_millis().to_string(),
        settings.relation_ttl_seconds().to_string(),
        "young".into(),
        keys.like_count_channel(remark, shards),
        engage::features::remarks::likes::LIKERS_KEPT.to_string(),
        keys.publish_command().into(),
    ]
    .join(" "))
}
