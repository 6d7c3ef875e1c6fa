//! Seasons and leaderboards: order, ties, the viewer's entry, neighbours, rollover to SQL,
//! and live snapshots.

use std::{collections::HashMap, time::Duration};

use chrono::{TimeZone, Utc};
use engage::{
    features::leaderboard::rollover::Options,
    infra::{auth::Role, clock::Month, lock},
};
use serde_json::{json, Value};
use sqlx::Row;

use crate::harness::{
    eventually, first_code, global_id, local_id, next_data, subscribe, unlimited, TestApp,
};

const AWARD: &str = "mutation($u: ID!, $p: Int!, $k: String!) {
    awardPoints(userId: $u, type: SIGN_IN, points: $p, idempotencyKey: $k) { awarded } }";
const BOARD: &str = "query($s: ID, $f: Int, $o: Int) { leaderboard(seasonId: $s, first: $f, offset: $o) {
    season { id current } total me { rank points user { id } } entries { rank points user { id } } } }";

async fn app() -> TestApp {
    TestApp::spawn_with(|config| {
        unlimited(config);
        config.leaderboard.rollover_check_seconds = 3600;
    })
    .await
}

async fn award(app: &TestApp, user: i64, points: i64) {
    let key = uuid::Uuid::new_v4().to_string();
    let service = app.token(999, Role::Service);
    app.data(
        Some(&service),
        AWARD,
        json!({ "u": user.to_string(), "p": points, "k": key }),
    )
    .await;
}

/// 2,500 more members of a season's board (users 1000 to 3499, under 90 points), written as
/// the award script would, so that a copy of the board takes chunks.
async fn many_members(app: &TestApp, season: Month) {
    let mut conn = app.redis_connection().await;
    let mut pipe = redis::pipe();
    for user in 1000..3500_i64 {
        let score = (user % 90) as f64 * 4_194_304.0 + (4_194_303 - user) as f64;
        pipe.cmd("ZADD")
            .arg(app.keys().season_board_of(season, user))
            .arg(score)
            .arg(user)
            .ignore();
    }
    let () = pipe.query_async(&mut *conn).await.unwrap();
}

/// (rank, points, user number) of a board's entries.
fn ranks(board: &Value) -> Vec<(i64, i64, String)> {
    board["leaderboard"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["rank"].as_i64().unwrap(),
                e["points"].as_i64().unwrap(),
                local_id(e["user"]["id"].as_str().unwrap()).to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_board_orders_by_points_then_by_who_got_there_first() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 3, 5, 8, 0, 0).unwrap();
    app.set_clock(start);
    award(&app, 51, 30).await;
    app.set_clock(start + chrono::Duration::seconds(5));
    award(&app, 52, 50).await;
    app.set_clock(start + chrono::Duration::seconds(10));
    award(&app, 53, 20).await;
    award(&app, 54, 5).await;
    app.set_clock(start + chrono::Duration::seconds(20));
    award(&app, 53, 10).await; // 53 reaches 30 after 51 did: 51 stays ahead

    let viewer = app.user_token(54);
    let board = app
        .data(Some(&viewer), BOARD, json!({ "f": 2, "o": 0 }))
        .await;
    assert_eq!(ranks(&board), [(1, 50, "52".into()), (2, 30, "51".into())]);
    assert_eq!(board["leaderboard"]["total"], 4);
    assert_eq!(
        board["leaderboard"]["season"],
        json!({ "id": global_id("Season", 202603), "current": true })
    );
    assert_eq!(
        board["leaderboard"]["me"],
        json!({ "rank": 4, "points": 5, "user": { "id": global_id("User", 54) } }),
        "me off the page"
    );

    let next = app.data(None, BOARD, json!({ "f": 2, "o": 2 })).await;
    assert_eq!(ranks(&next), [(3, 30, "53".into()), (4, 5, "54".into())]);
    assert_eq!(next["leaderboard"]["me"], Value::Null);

    let around = app
        .data(
            Some(&app.user_token(51)),
            "{ leaderboardAroundMe(radius: 1) { rank user { id } } }",
            json!({}),
        )
        .await;
    let users: Vec<i64> = around["leaderboardAroundMe"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| local_id(e["user"]["id"].as_str().unwrap()))
        .collect();
    assert_eq!(users, [52, 51, 53]);

    let seasons = app
        .data(
            None,
            "{ seasons { id name current beginsAt endsAt } }",
            json!({}),
        )
        .await;
    assert_eq!(
        seasons["seasons"][0],
        json!({
            "id": global_id("Season", 202603), "name": "March 2026", "current": true,
            "beginsAt": "2026-03-01T00:00:00.000Z", "endsAt": "2026-04-01T00:00:00.000Z"
        })
    );
    for bad in [
        json!({ "s": "202613" }),
        json!({ "s": "202604" }),
        json!({ "f": 101 }),
        json!({ "o": -1 }),
    ] {
        assert_eq!(
            first_code(&app.gql(None, BOARD, bad.clone()).await),
            "BAD_USER_INPUT",
            "{bad}"
        );
    }
}

#[tokio::test]
async fn rollover_copies_the_board_to_sql_resumably_and_only_once() {
    let app = app().await;
    let march = Month::parse_id("202603").unwrap();
    app.set_clock(Utc.with_ymd_and_hms(2026, 3, 20, 12, 0, 0).unwrap());
    for (user, points) in [(61, 300), (62, 200), (63, 100)] {
        award(&app, user, points).await;
    }
    many_members(&app, march).await;
    let live = app.data(None, BOARD, json!({ "f": 100, "o": 0 })).await;
    let live_tail = app.data(None, BOARD, json!({ "f": 100, "o": 2400 })).await;

    app.set_clock(Utc.with_ymd_and_hms(2026, 4, 2, 12, 0, 0).unwrap());
    // Another instance holds the lock: this one does nothing.
    let blocked = lock::with_lock(
        app.infra(),
        "rollover:202603",
        Duration::from_secs(10),
        |_| async {
            app.leaderboards()
                .archive_season(march, Options::default())
                .await
                .unwrap()
        },
    )
    .await
    .unwrap();
    assert_eq!(blocked, Some(None), "two instances never both run it");

    // Interrupted after one chunk, as a crash would, then resumed.
    let partial = app
        .leaderboards()
        .archive_season(
            march,
            Options {
                stop_after_chunks: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((partial.copied, partial.done), (1000, false));
    let finished = app
        .leaderboards()
        .archive_season(march, Options::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (finished.total, finished.copied, finished.done),
        (2503, 2503, true)
    );

    let archived = app
        .data(None, BOARD, json!({ "s": "202603", "f": 100, "o": 0 }))
        .await;
    let archived_tail = app
        .data(None, BOARD, json!({ "s": "202603", "f": 100, "o": 2400 }))
        .await;
    assert_eq!(ranks(&archived), ranks(&live));
    assert_eq!(ranks(&archived_tail), ranks(&live_tail));
    assert_eq!(archived["leaderboard"]["total"], 2503);
    assert_eq!(archived["leaderboard"]["season"]["current"], false);

    let mut conn = app.redis_connection().await;
    for part in app.keys().season_board_parts(march) {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&part)
            .query_async(&mut *conn)
            .await
            .unwrap();
        assert!(!exists, "the Redis board is unlinked: {part}");
    }
    drop(conn);

    let seasons = app
        .data(
            None,
            "{ seasons { id current winners { rank points user { id } } } }",
            json!({}),
        )
        .await;
    let march_season = seasons["seasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == global_id("Season", 202603))
        .unwrap()
        .clone();
    assert_eq!(
        march_season["winners"],
        json!([
            { "rank": 1, "points": 300, "user": { "id": global_id("User", 61) } },
            { "rank": 2, "points": 200, "user": { "id": global_id("User", 62) } },
            { "rank": 3, "points": 100, "user": { "id": global_id("User", 63) } },
        ])
    );
    // A repeat is a no-op.
    let again = app
        .leaderboards()
        .archive_season(march, Options::default())
        .await
        .unwrap()
        .unwrap();
    assert!(again.done);
}

#[tokio::test]
async fn a_subscriber_sees_the_top_change_after_a_sign_in() {
    let app = app().await;
    award(&app, 71, 5).await;
    let query = "subscription { leaderboardChanged(top: 3) { season { id } entries { rank points user { id } } } }";
    let mut socket = subscribe(&app, None, query).await;
    let mut next = async || next_data(&mut socket).await["leaderboardChanged"]["entries"].clone();
    assert_eq!(
        next().await,
        json!([{ "rank": 1, "points": 5, "user": { "id": global_id("User", 71) } }])
    );

    app.data(
        Some(&app.user_token(72)),
        "mutation { signIn { pointsAwarded } }",
        json!({}),
    )
    .await;
    award(&app, 72, 10).await;
    let entries = next().await;
    let users: Vec<i64> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| local_id(e["user"]["id"].as_str().unwrap()))
        .collect();
    assert!(users.contains(&72), "the new member shows: {entries}");
}

#[tokio::test]
async fn my_rank_changes_are_pushed_to_the_signed_in_viewer() {
    let app = app().await;
    award(&app, 81, 50).await;
    award(&app, 82, 10).await;
    let token = app.user_token(82);
    let mut socket = subscribe(
        &app,
        Some(&token),
        "subscription { myRankChanged { rank points } }",
    )
    .await;
    let mut next = async || next_data(&mut socket).await["myRankChanged"].clone();
    assert_eq!(next().await, json!({ "rank": 2, "points": 10 }));
    award(&app, 82, 45).await;
    assert_eq!(next().await, json!({ "rank": 1, "points": 55 }));
    award(&app, 81, 10).await; // someone else overtakes: the viewer's rank changes too
    assert_eq!(next().await, json!({ "rank": 2, "points": 55 }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_subscribers_of_one_board_cost_one_read_per_change() {
    // Periodic background work shares the pool: slow it down so that only reads count.
    let app = TestApp::spawn_with(|config| {
        unlimited(config);
        config.leaderboard.rollover_check_seconds = 3600;
        config.jobs.jobs_tick_ms = 600_000;
    })
    .await;
    award(&app, 91, 50).await;
    // The entries' users are resolved per subscriber, through a batch loader whose batches
    // depend on timing. Both users are named and in this instance's memory first, so that
    // the count below is the board's reads alone.
    let mut conn = crate::harness::redis(&app).await;
    let keys = &app.keys();
    for id in [91, 92] {
        let card = engage::features::users::UserRecord {
            id,
            name: format!("user{id}"),
            avatar_url: None,
            bio: None,
        }
        .card();
        let () = redis::cmd("HSET")
            .arg(keys.user_names(id))
            .arg(id)
            .arg(card)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let named: HashMap<i64, _> = app.users().find_many(&[91, 92]).await.unwrap();
    assert_eq!(named.len(), 2);
    let query =
        "subscription { leaderboardChanged(top: 5) { entries { rank points user { id } } } }";
    let mut sockets = Vec::new();
    for _ in 0..20 {
        let mut socket = subscribe(&app, None, query).await;
        let first = next_data(&mut socket).await;
        assert_eq!(
            first["leaderboardChanged"]["entries"],
            json!([{ "rank": 1, "points": 50, "user": { "id": global_id("User", 91) } }])
        );
        sockets.push(socket);
    }
    crate::harness::streams_settled(&app, &app.keys().points_streams(), "archive").await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The board changes behind the app's back (as another instance's award would), so that
    // only the subscribers' reads are counted.
    let season = app.current_month();
    let before = app.redis_round_trips();
    let score = 60.0 * engage::features::leaderboard::SCORE_TIME_UNIT;
    let () = redis::pipe()
        .cmd("ZADD")
        .arg(app.keys().season_board_of(season, 92))
        .arg(score)
        .arg(92)
        .ignore()
        .cmd(app.keys().publish_command())
        .arg(app.keys().board_channel_of(season, 92))
        .arg(92)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    for socket in &mut sockets {
        let change = next_data(socket).await;
        assert_eq!(
            change["leaderboardChanged"]["entries"][0]["user"]["id"],
            global_id("User", 92),
            "{change}"
        );
    }
    let reads = app.redis_round_trips() - before;
    // The board's one read; the rest is room for background work that may fall in the
    // window (the test's own write goes through a connection of its own).
    assert!(
        reads <= 3,
        "{reads} round trips for one change seen by 20 subscribers"
    );
    assert_eq!(app.leaderboards().boards.readers(), 1);

    // The reader and its channel go with the last subscriber.
    let channels = app.keys().board_channels(season);
    let listening = || {
        channels
            .iter()
            .map(|channel| app.listeners_here(channel))
            .sum::<usize>()
    };
    drop(sockets);
    for _ in 0..250 {
        if app.leaderboards().boards.readers() == 0 && listening() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(app.leaderboards().boards.readers(), 0);
    assert_eq!(listening(), 0);
}

#[tokio::test]
async fn live_boards_without_a_season_follow_the_month_when_it_turns() {
    let app = app().await;
    let before_midnight = Utc.with_ymd_and_hms(2031, 1, 31, 23, 59, 50).unwrap();
    app.set_clock(before_midnight);
    award(&app, 71, 40).await;
    let board = "subscription { leaderboardChanged(top: 5) { season { id } entries { points user { id } } } }";
    let mut board = subscribe(&app, None, board).await;
    let first = next_data(&mut board).await["leaderboardChanged"].clone();
    assert_eq!(first["season"]["id"], global_id("Season", 203101));
    assert_eq!(
        first["entries"],
        json!([{ "points": 40, "user": { "id": global_id("User", 71) } }])
    );
    let token = app.user_token(71);
    let mut mine = subscribe(
        &app,
        Some(&token),
        "subscription { myRankChanged { rank points } }",
    )
    .await;
    assert_eq!(
        next_data(&mut mine).await["myRankChanged"],
        json!({ "rank": 1, "points": 40 })
    );

    // The month turns: the board moves to February's, empty until someone scores there.
    app.set_clock(before_midnight + chrono::Duration::seconds(20));
    let turned = next_data(&mut board).await["leaderboardChanged"].clone();
    assert_eq!(
        turned,
        json!({ "season": { "id": global_id("Season", 203102) }, "entries": [] })
    );
    award(&app, 71, 5).await;
    let scored = next_data(&mut board).await["leaderboardChanged"].clone();
    assert_eq!(scored["season"]["id"], global_id("Season", 203102));
    assert_eq!(
        scored["entries"],
        json!([{ "points": 5, "user": { "id": global_id("User", 71) } }])
    );
    assert_eq!(
        next_data(&mut mine).await["myRankChanged"],
        json!({ "rank": 1, "points": 5 })
    );
}

#[tokio::test]
async fn a_late_write_during_the_rollover_is_archived_once_with_every_member_once() {
    let app = app().await;
    let april = Month::parse_id("202604").unwrap();
    app.set_clock(Utc.with_ymd_and_hms(2026, 4, 20, 12, 0, 0).unwrap());
    for (user, points) in [(71, 300), (72, 200)] {
        award(&app, user, points).await;
    }
    many_members(&app, april).await;
    app.set_clock(Utc.with_ymd_and_hms(2026, 5, 1, 0, 1, 0).unwrap());
    let partial = app
        .leaderboards()
        .archive_season(
            april,
            Options {
                stop_after_chunks: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(partial.copied, 1000);

    // An award that took its season before midnight lands now, at the top of the board.
    let mut conn = app.redis_connection().await;
    let _: i64 = redis::cmd("ZADD")
        .arg(app.keys().season_board_of(april, 73))
        .arg(500.0 * 4_194_304.0)
        .arg(73)
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);

    let finished = app
        .leaderboards()
        .archive_season(april, Options::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((finished.total, finished.done), (2503, true));
    let rows = sqlx::query(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT user_id) AS users, MIN(rank) AS first, \
         MAX(rank) AS last FROM season_ranks WHERE season = 202604",
    )
    .fetch_one(app.sql())
    .await
    .unwrap();
    let count = |column: &str| rows.try_get::<i64, _>(column).unwrap();
    assert_eq!(
        (count("n"), count("users"), count("first"), count("last")),
        (2503, 2503, 1, 2503)
    );
    let seasons = app
        .data(
            None,
            "{ seasons { id winners { rank user { id } } } }",
            json!({}),
        )
        .await;
    let winners = seasons["seasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == global_id("Season", 202604))
        .unwrap()["winners"]
        .clone();
    assert_eq!(
        winners,
        json!([
            { "rank": 1, "user": { "id": global_id("User", 73) } },
            { "rank": 2, "user": { "id": global_id("User", 71) } },
            { "rank": 3, "user": { "id": global_id("User", 72) } },
        ])
    );
}

#[tokio::test]
async fn a_page_reads_its_users_names_from_redis_and_sql_only_for_those_redis_lacks() {
    let app = app().await;
    let tokens = app.signer();
    for (user, name) in [(11, "Ada"), (12, "Brian")] {
        let token = tokens.mint(user, Role::User, 3600, Some(name.into()));
        app.data(Some(&token), "{ viewer { id } }", json!({})).await;
    }
    for (user, points) in [(11, 30), (12, 20), (13, 10)] {
        award(&app, user, points).await;
    }
    let keys = app.keys().clone();
    let name_in_redis = |user: i64| {
        let keys = keys.clone();
        let app = &app;
        async move {
            let mut conn = app.redis_connection().await;
            redis::cmd("HEXISTS")
                .arg(keys.user_names(user))
                .arg(user)
                .query_async::<bool>(&mut *conn)
                .await
                .unwrap()
        }
    };
    // A first sight writes the name to Redis once the row is committed.
    eventually(async || name_in_redis(11).await && name_in_redis(12).await).await;

    const NAMES: &str = "{ leaderboard { entries { rank user { id name } } } }";
    let names = |board: &Value| -> Vec<String> {
        board["leaderboard"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["user"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    // An instance that has seen no one: the names come from Redis; SQL is asked once, for
    // user 13, who never signed in (no row: shown by the placeholder name).
    let fresh = app.spawn_sibling().await;
    let before = fresh.users().sql_reads();
    let board = fresh.data(None, NAMES, json!({})).await;
    assert_eq!(names(&board), ["Ada", "Brian", "user13"]);
    assert_eq!(fresh.users().sql_reads() - before, 1);

    // A name Redis lost is read from SQL and written back.
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("HDEL")
        .arg(keys.user_names(11))
        .arg(11)
        .query_async(&mut *conn)
        .await
        .unwrap();
    let another = app.spawn_sibling().await;
    let board = another.data(None, NAMES, json!({})).await;
    assert_eq!(names(&board), ["Ada", "Brian", "user13"]);
    assert!(name_in_redis(11).await);
}

/// A board in parts (one per points bucket) reads as one sorted set would: pages near the
/// top and deep ones, ranks, ties across parts, the total, and the copy a rollover makes.
#[tokio::test]
async fn a_board_in_parts_reads_and_archives_as_one_board() {
    let app = TestApp::spawn_with(|config| {
        unlimited(config);
        config.leaderboard.rollover_check_seconds = 3600;
        config.points.points_buckets = Some(5);
    })
    .await;
    let keys = &app.keys();
    assert_eq!(
        keys.season_board_parts(Month::parse_id("203005").unwrap())
            .len(),
        5
    );
    app.set_clock(Utc.with_ymd_and_hms(2030, 5, 20, 12, 0, 0).unwrap());
    let may = app.current_month();

    // 3,000 members, with runs of equal scores that span parts (users 9 and 10, 19 and 20, …
    // are in different buckets): Redis orders equals by member text, "9" before "10".
    let mut members: Vec<(i64, f64)> = (1..=3000_i64)
        .map(|user| {
            let points = (user * 7919) % 400 + 1;
            let seconds = if user % 10 < 2 { 0 } else { user % 1000 };
            let score = engage::features::leaderboard::score_of(points, seconds) as f64;
            (user, score)
        })
        .collect();
    let mut conn = crate::harness::redis(&app).await;
    let mut pipe = redis::pipe();
    for (user, score) in &members {
        pipe.cmd("ZADD")
            .arg(keys.season_board_of(may, *user))
            .arg(*score)
            .arg(*user)
            .ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
    members.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap()
            .then_with(|| b.0.to_string().cmp(&a.0.to_string()))
    });
    let expected = |offset: usize, first: usize| -> Vec<(i64, i64, String)> {
        members
            .iter()
            .enumerate()
            .skip(offset)
            .take(first)
            .map(|(i, (user, score))| {
                (
                    i as i64 + 1,
                    engage::features::leaderboard::points_of(*score),
                    user.to_string(),
                )
            })
            .collect()
    };

    // Near the top (each part's top, merged) and deep (found by score): 990 + 20 crosses
    // from one way of reading to the other.
    for (offset, first) in [
        (0, 20),
        (0, 100),
        (500, 100),
        (990, 20),
        (1500, 100),
        (2950, 100),
        (3000, 10),
    ] {
        let page = app
            .data(None, BOARD, json!({ "f": first, "o": offset }))
            .await;
        assert_eq!(
            ranks(&page),
            expected(offset, first),
            "offset {offset}, first {first}"
        );
        assert_eq!(page["leaderboard"]["total"], 3000);
    }

    // A viewer's rank counts who is ahead of them in every part, ties included.
    for (index, (user, _)) in members.iter().enumerate().step_by(137) {
        let viewer = app.token(*user, Role::User);
        let board = app
            .data(Some(&viewer), BOARD, json!({ "f": 1, "o": 0 }))
            .await;
        assert_eq!(
            board["leaderboard"]["me"]["rank"],
            index as i64 + 1,
            "user {user}"
        );
    }

    // The rollover copies the parts in rank order.
    app.set_clock(Utc.with_ymd_and_hms(2030, 6, 2, 12, 0, 0).unwrap());
    let done = app
        .leaderboards()
        .archive_season(may, Options::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((done.total, done.copied, done.done), (3000, 3000, true));
    for (offset, first) in [(0, 100), (1000, 100), (2950, 100)] {
        let page = app
            .data(
                None,
                BOARD,
                json!({ "s": "203005", "f": first, "o": offset }),
            )
            .await;
        assert_eq!(
            ranks(&page),
            expected(offset, first),
            "archived, offset {offset}"
        );
    }
    for part in keys.season_board_parts(may) {
        let exists: bool = redis::cmd("EXISTS")
            .arg(&part)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!exists, "{part} is unlinked");
    }
}

/// Every member's (rank, points) on a season's board: each part read whole, then ordered as
/// `ZREVRANK` orders one sorted set (score, then member text, descending).
async fn ranks_in_redis(app: &TestApp, season: Month) -> HashMap<i64, (i64, i64)> {
    let mut conn = crate::harness::redis(app).await;
    let mut members: Vec<(i64, f64)> = Vec::new();
    for part in app.keys().season_board_parts(season) {
        let held: Vec<(i64, f64)> = redis::cmd("ZRANGE")
            .arg(part)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await
            .unwrap();
        members.extend(held);
    }
    members.sort_by(|a, b| {
        b.1.partial_cmp(&a.1)
            .unwrap()
            .then_with(|| b.0.to_string().cmp(&a.0.to_string()))
    });
    members
        .iter()
        .enumerate()
        .map(|(i, (user, score))| {
            let points = engage::features::leaderboard::points_of(*score);
            (*user, (i as i64 + 1, points))
        })
        .collect()
}

/// A viewer's `myRankChanged` socket and the last entry it was sent.
struct Viewer {
    user: i64,
    socket: crate::harness::Socket,
    last: Option<Value>,
}

impl Viewer {
    async fn join(app: &TestApp, user: i64) -> Self {
        let token = app.user_token(user);
        let socket = subscribe(
            app,
            Some(&token),
            "subscription { myRankChanged { rank points } }",
        )
        .await;
        Self {
            user,
            socket,
            last: None,
        }
    }

    /// Takes what the socket was sent until it stays quiet.
    async fn settle(&mut self) {
        while let Ok(data) =
            tokio::time::timeout(Duration::from_millis(150), next_data(&mut self.socket)).await
        {
            self.last = Some(data["myRankChanged"].clone());
        }
    }
}

/// Waits for the awards' messages to be handed over, then checks every viewer's last entry
/// against the board in Redis.
async fn assert_exact(app: &TestApp, viewers: &mut [Viewer], after: &str) {
    tokio::time::sleep(Duration::from_millis(600)).await;
    let season = app.current_month();
    let expected = ranks_in_redis(app, season).await;
    for viewer in viewers.iter_mut() {
        viewer.settle().await;
        let wanted = expected
            .get(&viewer.user)
            .map(|(rank, points)| json!({ "rank": rank, "points": points }));
        assert_eq!(viewer.last, wanted, "user {} {after}", viewer.user);
    }
}

/// Awards in `rounds` of `at_once` concurrent awards: random users of `users`, 1 to 3
/// points each, so that many land in the same second with the same points (ties).
async fn random_awards(
    app: &TestApp,
    rng: &mut rand::rngs::StdRng,
    users: std::ops::RangeInclusive<i64>,
    rounds: usize,
    at_once: usize,
) {
    use rand::Rng;
    for _ in 0..rounds {
        let batch: Vec<(i64, i64)> = (0..at_once)
            .map(|_| (rng.random_range(users.clone()), rng.random_range(1..=3)))
            .collect();
        futures::future::join_all(
            batch
                .into_iter()
                .map(|(user, points)| award(app, user, points)),
        )
        .await;
    }
}

/// A board in three parts whose users 1 to 30 hold scores with runs of equals across the
/// parts (written before anyone watches, as a board from before would be).
async fn app_with_a_board_in_parts() -> TestApp {
    let app = TestApp::spawn_with(|config| {
        config.rate_limit_per_ip = 0;
        config.rate_limit_per_user = 0;
        config.leaderboard.rollover_check_seconds = 3600;
        config.points.points_buckets = Some(3);
    })
    .await;
    let season = app.current_month();
    let keys = &app.keys();
    let mut conn = crate::harness::redis(&app).await;
    let mut pipe = redis::pipe();
    for user in 1..=30_i64 {
        let score = engage::features::leaderboard::score_of(user % 4 + 1, 0);
        pipe.cmd("ZADD")
            .arg(keys.season_board_of(season, user))
            .arg(score)
            .arg(user)
            .ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
    app
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_viewers_rank_follows_a_random_sequence_of_awards_exactly() {
    use rand::SeedableRng;
    let app = app_with_a_board_in_parts().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(44);
    // Users 1 to 30 are on the board, 31 to 40 not yet; 41 to 60 are awarded unwatched.
    let mut viewers = Vec::new();
    for user in 1..=40 {
        viewers.push(Viewer::join(&app, user).await);
    }
    assert_exact(&app, &mut viewers, "when they joined").await;
    for round in 0..4 {
        random_awards(&app, &mut rng, 1..=60, 15, 8).await;
        assert_exact(&app, &mut viewers, &format!("after round {round}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_joining_during_a_burst_of_awards_ends_with_its_exact_rank() {
    use rand::SeedableRng;
    let app = app_with_a_board_in_parts().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(4404);
    // One viewer first, so that the board's reader runs when the others join.
    let mut viewers = vec![Viewer::join(&app, 1).await];
    let burst = random_awards(&app, &mut rng, 1..=50, 40, 6);
    let joins = async {
        let mut joined = Vec::new();
        for user in 2..=25 {
            tokio::time::sleep(Duration::from_millis(15)).await;
            joined.push(Viewer::join(&app, user).await);
        }
        joined
    };
    let ((), joined) = tokio::join!(burst, joins);
    viewers.extend(joined);
    assert_exact(&app, &mut viewers, "after the burst").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn viewers_read_again_what_they_cannot_apply_a_foreign_message_a_missed_change_or_a_rebuild()
{
    let app = app().await;
    award(&app, 81, 50).await;
    award(&app, 82, 10).await;
    let mut viewers = vec![Viewer::join(&app, 82).await];
    assert_exact(&app, &mut viewers, "when it joined").await;
    let season = app.current_month();
    let keys = &app.keys();
    let mut conn = crate::harness::redis(&app).await;
    let score = |points| engage::features::leaderboard::score_of(points, 0);

    // Another writer's member, announced as older scripts did (the user alone).
    let () = redis::pipe()
        .cmd("ZADD")
        .arg(keys.season_board_of(season, 83))
        .arg(score(100))
        .arg(83)
        .ignore()
        .cmd(keys.publish_command())
        .arg(keys.board_channel_of(season, 83))
        .arg(83)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_exact(&app, &mut viewers, "after a message that is no change").await;

    // A change whose predecessor (user 86's arrival, in the same part) never arrived.
    let counter = keys.board_changes_of(season, 84);
    let number: i64 = redis::cmd("INCRBY")
        .arg(&counter)
        .arg(2)
        .query_async(&mut conn)
        .await
        .unwrap();
    let () = redis::pipe()
        .cmd("ZADD")
        .arg(keys.season_board_of(season, 84))
        .arg(score(150))
        .arg(86)
        .ignore()
        .cmd("ZADD")
        .arg(keys.season_board_of(season, 84))
        .arg(score(200))
        .arg(84)
        .ignore()
        .cmd(keys.publish_command())
        .arg(keys.board_channel_of(season, 84))
        .arg(format!("{number} 84 - {}", score(200)))
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_exact(&app, &mut viewers, "after a change that skipped one").await;

    // A member SQL never heard of, unannounced; the rebuild takes it away again and says so.
    let () = redis::cmd("ZADD")
        .arg(keys.season_board_of(season, 85))
        .arg(score(300))
        .arg(85)
        .query_async(&mut conn)
        .await
        .unwrap();
    crate::harness::streams_settled(&app, &keys.points_streams(), "archive").await;
    app.rebuild_from_sql().await.expect("rebuild");
    assert_exact(&app, &mut viewers, "after a rebuild").await;
    assert_eq!(
        viewers[0].last,
        Some(json!({ "rank": 2, "points": 10 })),
        "the rebuilt board holds what SQL holds"
    );
}
