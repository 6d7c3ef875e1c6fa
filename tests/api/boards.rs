//! Boards: operators and orders, ties, periods at their resets (a DST change among them),
//! idempotent submissions, tournaments (window, joins, the cap), roles, friends and
//! around-me, record removal, and closing a period with its rewards paid exactly once.

use chrono::{TimeZone, Utc};
use engage::{features::boards::close::CloseOptions, infra::auth::Role};
use serde_json::{json, Value};
use sqlx::Row;

use crate::harness::{first_code, global_id, local_id, scan, unlimited, unlink, TestApp};

const CREATE: &str = "mutation($i: CreateBoardInput!) { createBoard(input: $i) {
    id key period reset operator order authoritative joinRequired maxEntries } }";
const SUBMIT: &str = "mutation($b: String!, $u: ID, $s: Int!, $ss: Int, $m: JSON, $k: String!) {
    submitScore(boardKey: $b, userId: $u, score: $s, subscore: $ss, metadata: $m, idempotencyKey: $k) {
    rank score subscore metadata user { id } updatedAt } }";
const PAGE: &str = "query($b: String!, $p: String, $f: Int, $o: Int, $fr: Boolean) {
    board(key: $b, period: $p, first: $f, offset: $o, friendsOnly: $fr) {
    board { key } period total me { rank score user { id } } records { rank score subscore user { id } } } }";

async fn app() -> TestApp {
    TestApp::spawn_with(|config| {
        unlimited(config);
        config.leaderboard.rollover_check_seconds = 3600;
    })
    .await
}

async fn create(app: &TestApp, input: Value) -> Value {
    app.data(Some(&app.admin_token()), CREATE, json!({ "i": input }))
        .await["createBoard"]
        .clone()
}

async fn submit_as(
    app: &TestApp,
    token: &str,
    board: &str,
    user: i64,
    score: i64,
    subscore: i64,
) -> Value {
    app.gql(
        Some(token),
        SUBMIT,
        json!({ "b": board, "u": user.to_string(), "s": score, "ss": subscore,
                "k": uuid::Uuid::new_v4().to_string() }),
    )
    .await
}

async fn submit(app: &TestApp, board: &str, user: i64, score: i64, subscore: i64) -> Value {
    let service = app.token(999, Role::Service);
    let body = submit_as(app, &service, board, user, score, subscore).await;
    assert!(body.get("errors").is_none(), "{body}");
    body["data"]["submitScore"].clone()
}

async fn page(app: &TestApp, token: Option<&str>, board: &str, period: Option<&str>) -> Value {
    app.data(token, PAGE, json!({ "b": board, "p": period, "f": 50 }))
        .await["board"]
        .clone()
}

/// (rank, user, score) of a page's records.
fn ranks(page: &Value) -> Vec<(i64, i64, i64)> {
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_i64().unwrap(),
                local_id(r["user"]["id"].as_str().unwrap()),
                r["score"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The current season board's (user, points), in rank order.
async fn season_points(app: &TestApp) -> Vec<(i64, i64)> {
    let season = app
        .data(
            None,
            "{ leaderboard(first: 10) { entries { points user { id } } } }",
            json!({}),
        )
        .await;
    season["leaderboard"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                local_id(e["user"]["id"].as_str().unwrap()),
                e["points"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn each_operator_and_order_ranks_as_it_says() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    for (key, operator, order) in [
        ("inc", "INCREMENT", "DESC"),
        ("dec", "DECREMENT", "DESC"),
        ("best", "BEST", "DESC"),
        ("fastest", "BEST", "ASC"),
        ("set", "SET", "DESC"),
    ] {
        let board = create(
            &app,
            json!({ "key": key, "title": key, "reset": "NEVER", "operator": operator, "order": order }),
        )
        .await;
        assert_eq!(board["id"], global_id("Board", key));
        assert_eq!(board["period"], "all");
        assert_eq!(board["authoritative"], true);
    }

    submit(&app, "inc", 1, 10, 0).await;
    submit(&app, "inc", 1, 5, 0).await;
    submit(&app, "inc", 2, 12, 0).await;
    assert_eq!(
        ranks(&page(&app, None, "inc", None).await),
        vec![(1, 1, 15), (2, 2, 12)]
    );

    submit(&app, "dec", 1, 3, 0).await;
    submit(&app, "dec", 2, 1, 0).await;
    assert_eq!(
        ranks(&page(&app, None, "dec", None).await),
        vec![(1, 2, -1), (2, 1, -3)]
    );

    // BEST keeps the best for the order; the subscore breaks a tie of scores.
    submit(&app, "best", 1, 50, 1).await;
    let kept = submit(&app, "best", 1, 40, 9).await;
    assert_eq!(
        (kept["score"].as_i64(), kept["subscore"].as_i64()),
        (Some(50), Some(1))
    );
    submit(&app, "best", 2, 50, 3).await;
    submit(&app, "best", 3, 70, 0).await;
    assert_eq!(
        ranks(&page(&app, None, "best", None).await),
        vec![(1, 3, 70), (2, 2, 50), (3, 1, 50)]
    );

    submit(&app, "fastest", 1, 31, 0).await;
    submit(&app, "fastest", 1, 35, 0).await;
    submit(&app, "fastest", 2, 29, 0).await;
    submit(&app, "fastest", 3, 40, 0).await;
    assert_eq!(
        ranks(&page(&app, None, "fastest", None).await),
        vec![(1, 2, 29), (2, 1, 31), (3, 3, 40)]
    );

    submit(&app, "set", 1, 80, 0).await;
    submit(&app, "set", 1, 20, 0).await;
    submit(&app, "set", 2, 30, 0).await;
    assert_eq!(
        ranks(&page(&app, None, "set", None).await),
        vec![(1, 2, 30), (2, 1, 20)]
    );

    // Equal records: whoever reached the score first ranks first, whatever the user ids.
    app.set_clock(start + chrono::Duration::seconds(10));
    submit(&app, "inc", 9, 15, 0).await;
    app.set_clock(start + chrono::Duration::seconds(20));
    submit(&app, "inc", 2, 3, 0).await;
    assert_eq!(
        ranks(&page(&app, None, "inc", None).await),
        vec![(1, 1, 15), (2, 9, 15), (3, 2, 15)]
    );
}

#[tokio::test]
async fn a_replayed_submission_changes_nothing_even_after_redis_forgot_its_key() {
    let app = app().await;
    create(
        &app,
        json!({ "key": "runs", "title": "Runs", "reset": "NEVER" }),
    )
    .await;
    let service = app.token(999, Role::Service);
    let vars = json!({ "b": "runs", "u": "7", "s": 10, "k": "run-1",
                       "m": { "map": "dunes", "laps": 3 } });
    let first = app.data(Some(&service), SUBMIT, vars.clone()).await;
    assert_eq!(first["submitScore"]["score"], 10);
    assert_eq!(
        first["submitScore"]["metadata"],
        json!({ "map": "dunes", "laps": 3 })
    );
    let again = app.data(Some(&service), SUBMIT, vars.clone()).await;
    assert_eq!(again["submitScore"]["score"], 10);
    // Redis forgets the key (its marker expires after a week): SQL still remembers.
    let markers = scan(&app, &format!("{}*sub:7:*", app.keys().prefix())).await;
    assert_eq!(markers.len(), 1, "{markers:?}");
    unlink(&app, &markers).await;
    let later = app.data(Some(&service), SUBMIT, vars).await;
    assert_eq!(later["submitScore"]["score"], 10);
    let rows: i64 =
        sqlx::query("SELECT COUNT(*) AS n FROM board_submissions WHERE board_key = 'runs'")
            .fetch_one(app.sql())
            .await
            .unwrap()
            .try_get("n")
            .unwrap();
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn periods_turn_at_their_resets_in_the_service_time_zone_across_a_dst_change() {
    let app = TestApp::spawn_with(|config| {
        config.timezone = chrono_tz::Europe::Berlin;
        config.rate_limit_per_ip = 0;
        config.rate_limit_per_user = 0;
        config.leaderboard.rollover_check_seconds = 3600;
    })
    .await;
    for (key, reset) in [("d", "DAILY"), ("w", "WEEKLY"), ("m", "MONTHLY")] {
        create(&app, json!({ "key": key, "title": key, "reset": reset })).await;
    }
    let period = |key: &'static str| {
        let app = &app;
        async move { page(app, None, key, None).await["period"].clone() }
    };
    // Sunday 29 November 2026, 23:59:59 in Berlin (UTC+1): day, ISO week 48, November.
    app.set_clock(Utc.with_ymd_and_hms(2026, 11, 29, 22, 59, 59).unwrap());
    submit(&app, "d", 1, 5, 0).await;
    assert_eq!(period("d").await, "2026-11-29");
    assert_eq!(period("w").await, "2026-W48");
    // One second later: a new day and a new week, each with an empty board.
    app.advance_clock(chrono::Duration::seconds(1));
    assert_eq!(period("d").await, "2026-11-30");
    assert_eq!(period("w").await, "2026-W49");
    let today = page(&app, None, "d", None).await;
    assert_eq!(today["total"], 0);
    let yesterday = page(&app, None, "d", Some("2026-11-29")).await;
    assert_eq!(ranks(&yesterday), vec![(1, 1, 5)]);
    // The month turns at the local midnight of 1 December.
    app.set_clock(Utc.with_ymd_and_hms(2026, 11, 30, 22, 59, 59).unwrap());
    assert_eq!(period("m").await, "2026-11");
    app.advance_clock(chrono::Duration::seconds(1));
    assert_eq!(period("m").await, "2026-12");

    // Sunday 25 October 2026 has 25 hours in Berlin: it ends at 23:00 UTC, not 22:00.
    app.set_clock(Utc.with_ymd_and_hms(2026, 10, 25, 22, 30, 0).unwrap());
    assert_eq!(period("d").await, "2026-10-25");
    app.set_clock(Utc.with_ymd_and_hms(2026, 10, 25, 23, 0, 0).unwrap());
    assert_eq!(period("d").await, "2026-10-26");
    // And it began at 22:00 UTC the day before (midnight of summer time).
    app.set_clock(Utc.with_ymd_and_hms(2026, 10, 24, 21, 59, 59).unwrap());
    assert_eq!(period("d").await, "2026-10-24");
    app.set_clock(Utc.with_ymd_and_hms(2026, 10, 24, 22, 0, 0).unwrap());
    assert_eq!(period("d").await, "2026-10-25");
}

#[tokio::test]
async fn who_may_submit_depends_on_the_role_and_the_board() {
    let app = app().await;
    create(
        &app,
        json!({ "key": "official", "title": "Official", "reset": "NEVER" }),
    )
    .await;
    create(
        &app,
        json!({ "key": "casual", "title": "Casual", "reset": "NEVER", "authoritative": false }),
    )
    .await;
    let user = app.user_token(5);
    let refused = submit_as(&app, &user, "official", 5, 10, 0).await;
    assert_eq!(first_code(&refused), "FORBIDDEN", "{refused}");
    let other = submit_as(&app, &user, "casual", 6, 10, 0).await;
    assert_eq!(first_code(&other), "FORBIDDEN", "{other}");
    let own = app
        .data(
            Some(&user),
            "mutation { submitScore(boardKey: \"casual\", score: 4, idempotencyKey: \"a\") { score user { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(own["submitScore"]["score"], 4);
    assert_eq!(own["submitScore"]["user"]["id"], global_id("User", 5));
    let admin = submit_as(&app, &app.admin_token(), "official", 6, 10, 0).await;
    assert!(admin.get("errors").is_none(), "{admin}");
    let creating = app
        .gql(
            Some(&app.token(999, Role::Service)),
            CREATE,
            json!({ "i": { "key": "x", "title": "x", "reset": "NEVER" } }),
        )
        .await;
    assert_eq!(first_code(&creating), "FORBIDDEN");
    let missing = submit_as(&app, &app.admin_token(), "nope", 6, 10, 0).await;
    assert_eq!(first_code(&missing), "NOT_FOUND");
    let taken = app
        .gql(
            Some(&app.admin_token()),
            CREATE,
            json!({ "i": { "key": "casual", "title": "again", "reset": "NEVER" } }),
        )
        .await;
    assert_eq!(first_code(&taken), "CONFLICT");
}

#[tokio::test]
async fn a_tournament_takes_scores_in_its_window_from_those_who_joined_up_to_its_cap() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    let starts = start + chrono::Duration::hours(1);
    let ends = start + chrono::Duration::hours(2);
    create(
        &app,
        json!({ "key": "cup", "title": "Cup", "reset": "NEVER", "joinRequired": true,
                "maxEntries": 50, "startsAt": starts.to_rfc3339(), "endsAt": ends.to_rfc3339() }),
    )
    .await;
    let early = submit_as(&app, &app.admin_token(), "cup", 1, 10, 0).await;
    assert_eq!(first_code(&early), "NOT_STARTED", "{early}");

    // 500 users join at once: exactly 50 get in.
    let joins = futures::future::join_all((1..=500_i64).map(|user| {
        let app = &app;
        async move {
            app.gql(
                Some(&app.user_token(user)),
                "mutation { joinBoard(key: \"cup\") { key } }",
                json!({}),
            )
            .await
        }
    }))
    .await;
    let joined: Vec<i64> = joins
        .iter()
        .enumerate()
        .filter(|(_, body)| body.get("errors").is_none())
        .map(|(i, _)| i as i64 + 1)
        .collect();
    assert_eq!(joined.len(), 50);
    for body in joins.iter().filter(|body| body.get("errors").is_some()) {
        assert_eq!(first_code(body), "BOARD_FULL", "{body}");
    }
    let rows: i64 = sqlx::query("SELECT COUNT(*) AS n FROM board_joins WHERE board_key = 'cup'")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .try_get("n")
        .unwrap();
    assert_eq!(rows, 50);
    // Joining again changes nothing.
    let again = app
        .gql(
            Some(&app.user_token(joined[0])),
            "mutation { joinBoard(key: \"cup\") { key } }",
            json!({}),
        )
        .await;
    assert!(again.get("errors").is_none(), "{again}");

    app.set_clock(starts);
    let outsider = (1..=500).find(|user| !joined.contains(user)).unwrap();
    let refused = submit_as(&app, &app.admin_token(), "cup", outsider, 10, 0).await;
    assert_eq!(first_code(&refused), "NOT_JOINED", "{refused}");
    submit(&app, "cup", joined[0], 10, 0).await;
    app.set_clock(ends);
    let late = submit_as(&app, &app.admin_token(), "cup", joined[1], 10, 0).await;
    assert_eq!(first_code(&late), "ENDED", "{late}");
}

#[tokio::test]
async fn friends_boards_and_around_me_rank_the_viewer_among_the_right_users() {
    let app = app().await;
    create(
        &app,
        json!({ "key": "steps", "title": "Steps", "reset": "NEVER" }),
    )
    .await;
    for user in 1..=20_i64 {
        submit(&app, "steps", user, user * 10, 0).await;
    }
    let viewer = app.user_token(5);
    for followee in [12_i64, 3] {
        // A user exists once seen.
        app.data(
            Some(&app.user_token(followee)),
            "{ viewer { id } }",
            json!({}),
        )
        .await;
        app.data(
            Some(&viewer),
            "mutation($u: ID!) { followUser(userId: $u) { changed } }",
            json!({ "u": followee.to_string() }),
        )
        .await;
    }
    let friends = app
        .data(Some(&viewer), PAGE, json!({ "b": "steps", "fr": true }))
        .await["board"]
        .clone();
    assert_eq!(ranks(&friends), vec![(1, 12, 120), (2, 5, 50), (3, 3, 30)]);
    assert_eq!(friends["total"], 3);
    assert_eq!(friends["me"]["rank"], 2);

    let everyone = page(&app, Some(&viewer), "steps", None).await;
    assert_eq!(everyone["me"]["rank"], 16);
    assert_eq!(everyone["total"], 20);

    let around = app
        .data(
            Some(&viewer),
            "{ boardAroundMe(key: \"steps\", radius: 2) { rank user { id } } }",
            json!({}),
        )
        .await;
    let users: Vec<i64> = around["boardAroundMe"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| local_id(r["user"]["id"].as_str().unwrap()))
        .collect();
    assert_eq!(users, vec![7, 6, 5, 4, 3]);
    let around_friends = app
        .data(
            Some(&viewer),
            "{ boardAroundMe(key: \"steps\", radius: 1, friendsOnly: true) { rank user { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(around_friends["boardAroundMe"].as_array().unwrap().len(), 3);

    // Equal scores next to the viewer, and the ends of the board.
    submit(&app, "steps", 30, 50, 0).await;
    submit(&app, "steps", 31, 50, 0).await;
    let around = |user: i64, radius: i64| {
        let app = &app;
        async move {
            let body = app
                .data(
                    Some(&app.user_token(user)),
                    "query($r: Int) { boardAroundMe(key: \"steps\", radius: $r) { rank user { id } } }",
                    json!({ "r": radius }),
                )
                .await;
            body["boardAroundMe"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["rank"].as_i64().unwrap(),
                        local_id(r["user"]["id"].as_str().unwrap()),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(around(5, 1).await, vec![(15, 6), (16, 5), (17, 30)]);
    assert_eq!(around(31, 1).await, vec![(17, 30), (18, 31), (19, 4)]);
    assert_eq!(around(20, 2).await, vec![(1, 20), (2, 19), (3, 18)]);
    assert_eq!(around(1, 1).await, vec![(21, 2), (22, 1)]);
}

#[tokio::test]
async fn a_removed_record_leaves_the_live_board_and_the_archive_and_everyone_moves_up() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    create(
        &app,
        json!({ "key": "race", "title": "Race", "reset": "DAILY" }),
    )
    .await;
    for user in 1..=4_i64 {
        submit(&app, "race", user, user * 10, 0).await;
    }
    let admin = app.admin_token();
    let remove = "mutation($b: String!, $u: ID!, $p: String) {
        removeBoardRecord(boardKey: $b, userId: $u, period: $p) }";
    let removed = app
        .data(Some(&admin), remove, json!({ "b": "race", "u": "3" }))
        .await;
    assert_eq!(removed["removeBoardRecord"], true);
    assert_eq!(
        ranks(&page(&app, None, "race", None).await),
        vec![(1, 4, 40), (2, 2, 20), (3, 1, 10)]
    );
    let user = app
        .gql(
            Some(&app.user_token(1)),
            remove,
            json!({ "b": "race", "u": "2" }),
        )
        .await;
    assert_eq!(first_code(&user), "FORBIDDEN");

    // Closed and archived: a removal there re-ranks the archive.
    let closed = app
        .data(
            Some(&admin),
            "mutation { closeBoardPeriod(key: \"race\") { period } }",
            json!({}),
        )
        .await;
    assert_eq!(closed["closeBoardPeriod"]["period"], "2026-11-23.2");
    let archived = page(&app, None, "race", Some("2026-11-23")).await;
    assert_eq!(ranks(&archived), vec![(1, 4, 40), (2, 2, 20), (3, 1, 10)]);
    app.data(
        Some(&admin),
        remove,
        json!({ "b": "race", "u": "4", "p": "2026-11-23" }),
    )
    .await;
    let archived = page(&app, None, "race", Some("2026-11-23")).await;
    assert_eq!(ranks(&archived), vec![(1, 2, 20), (2, 1, 10)]);
    assert_eq!(archived["total"], 2);
}

/// The rewards paid for a period: (user, points) per `reward:` award, in rank order.
async fn rewards_paid(app: &TestApp, board: &str, period: &str) -> Vec<(i64, i64, String)> {
    let rows = sqlx::query(
        "SELECT user_id, points, idempotency_key FROM points_record WHERE idempotency_key LIKE $1 \
         ORDER BY idempotency_key",
    )
    .bind(format!("reward:{board}:{period}:%"))
    .fetch_all(app.sql())
    .await
    .unwrap();
    rows.iter()
        .map(|row| {
            (
                row.try_get("user_id").unwrap(),
                row.try_get("points").unwrap(),
                row.try_get("idempotency_key").unwrap(),
            )
        })
        .collect()
}

async fn wait_for_rewards(
    app: &TestApp,
    board: &str,
    period: &str,
    count: usize,
) -> Vec<(i64, i64, String)> {
    // Up to 30 s: under the whole suite on two cores, a payout's record reached SQL after
    // more than the 10 s this once waited.
    for _ in 0..300 {
        let paid = rewards_paid(app, board, period).await;
        if paid.len() >= count {
            return paid;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    rewards_paid(app, board, period).await
}

#[tokio::test]
async fn closing_a_period_pays_its_rewards_exactly_once_across_instances_and_a_crash() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    let item = app.create_item().await;
    let voucher = app
        .data(
            Some(&app.admin_token()),
            "mutation($input: CreateVoucherInput!) { createVoucher(input: $input) { id } }",
            json!({ "input": { "itemId": item, "title": "Winner's tea", "stock": 1,
                    "beginsAt": start.to_rfc3339(),
                    "endsAt": (start + chrono::Duration::days(30)).to_rfc3339(),
                    "payWithinSeconds": 600 } }),
        )
        .await["createVoucher"]["id"]
        .clone();
    create(
        &app,
        json!({ "key": "weekly", "title": "Weekly", "reset": "WEEKLY",
                "rewards": [ { "fromRank": 1, "toRank": 1, "points": 100, "voucherId": voucher },
                             { "fromRank": 2, "toRank": 3, "points": 30 } ] }),
    )
    .await;
    for user in 1..=5_i64 {
        submit(&app, "weekly", user, user, 0).await;
    }
    let admin = app.admin_token();
    let closed = app
        .data(
            Some(&admin),
            "mutation { closeBoardPeriod(key: \"weekly\") { period rewards { fromRank toRank points } } }",
            json!({}),
        )
        .await;
    assert_eq!(closed["closeBoardPeriod"]["period"], "2026-W48.2");
    let paid = wait_for_rewards(&app, "weekly", "2026-W48", 3).await;
    assert_eq!(
        paid.iter().map(|(u, p, _)| (*u, *p)).collect::<Vec<_>>(),
        vec![(5, 100), (4, 30), (3, 30)]
    );
    // Archiving it again, from this instance or another, pays nothing more.
    let sibling = app.spawn_sibling().await;
    let (a, b) = tokio::join!(
        app.boards()
            .archive_period("weekly", "2026-W48", CloseOptions::default()),
        sibling
            .boards()
            .archive_period("weekly", "2026-W48", CloseOptions::default()),
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(rewards_paid(&app, "weekly", "2026-W48").await.len(), 3);

    // The next period, closed with a crash after its first payment: the run that takes
    // over (on the other instance) pays the rest, and the first one only once.
    for user in 1..=3_i64 {
        submit(&app, "weekly", user, 10 - user, 0).await;
    }
    sqlx::query(
        "INSERT INTO board_periods (board_key, period, base, early, closed_at_ms, total, copied, \
         status, fence, updated_at_ms) VALUES ('weekly', '2026-W48.2', '2026-W48', 1, 0, 0, 0, 'closing', 0, 0)",
    )
    .execute(app.sql())
    .await
    .unwrap();
    let stopped = app
        .boards()
        .archive_period(
            "weekly",
            "2026-W48.2",
            CloseOptions {
                stop_after_payments: Some(1),
                ..CloseOptions::default()
            },
        )
        .await
        .unwrap();
    assert!(!stopped);
    assert_eq!(
        wait_for_rewards(&app, "weekly", "2026-W48.2", 1)
            .await
            .len(),
        1
    );
    let (a, b) = tokio::join!(
        app.boards()
            .archive_period("weekly", "2026-W48.2", CloseOptions::default()),
        sibling
            .boards()
            .archive_period("weekly", "2026-W48.2", CloseOptions::default()),
    );
    assert!(a.unwrap() || b.unwrap());
    app.boards()
        .archive_period("weekly", "2026-W48.2", CloseOptions::default())
        .await
        .unwrap();
    let paid = wait_for_rewards(&app, "weekly", "2026-W48.2", 3).await;
    assert_eq!(
        paid.iter().map(|(u, p, _)| (*u, *p)).collect::<Vec<_>>(),
        vec![(1, 100), (2, 30), (3, 30)]
    );
    // Each payment went into the balance once: the season board holds each user's sum.
    let mut points = season_points(&app).await;
    points.sort();
    assert_eq!(points, vec![(1, 100), (2, 30), (3, 60), (4, 30), (5, 100)]);
    // The voucher is granted without an order; the user sees it with the points.
    let granted = app
        .data(
            Some(&app.user_token(5)),
            "{ myBoardRewards { boardKey period rank points voucher { id } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        granted["myBoardRewards"],
        json!([{ "boardKey": "weekly", "period": "2026-W48", "rank": 1, "points": 100,
                 "voucher": { "id": voucher } }])
    );
    // The rewards are points the users see.
    let history = app
        .data(
            Some(&app.user_token(1)),
            "{ pointsHistory(first: 10) { edges { node { points type } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        history["pointsHistory"]["edges"][0]["node"],
        json!({ "points": 100, "type": "REWARD" })
    );
}

#[tokio::test]
async fn verify_sees_a_lost_board_and_rebuild_brings_records_and_joins_back() {
    let app = app().await;
    create(
        &app,
        json!({ "key": "lost", "title": "Lost", "reset": "NEVER", "operator": "BEST" }),
    )
    .await;
    create(
        &app,
        json!({ "key": "club", "title": "Club", "reset": "NEVER", "joinRequired": true }),
    )
    .await;
    for user in 1..=30_i64 {
        submit(&app, "lost", user, user % 7, user).await;
    }
    for user in [3_i64, 4] {
        app.data(
            Some(&app.user_token(user)),
            "mutation { joinBoard(key: \"club\") { key } }",
            json!({}),
        )
        .await;
    }
    let before = page(&app, None, "lost", None).await;
    let clean = |reports: &[engage::infra::recovery::Report]| {
        reports
            .iter()
            .find(|report| report.feature == "boards")
            .map(|report| report.is_clean())
            .unwrap()
    };
    assert!(clean(&app.verify_all().await.unwrap()));

    let lost = scan(&app, &format!("{}{{board:*", app.keys().prefix())).await;
    assert!(!lost.is_empty());
    unlink(&app, &lost).await;
    assert!(!clean(&app.verify_all().await.unwrap()));
    app.rebuild_from_sql().await.unwrap();
    assert!(clean(&app.verify_all().await.unwrap()));
    assert_eq!(page(&app, None, "lost", None).await, before);
    let joined = submit(&app, "club", 3, 1, 0).await;
    assert_eq!(joined["score"], 1);
}

#[tokio::test]
async fn the_seasons_top_three_are_paid_once_at_its_rollover() {
    use engage::{features::leaderboard::rollover::Options, infra::clock::Month};
    let app = app().await;
    app.set_clock(Utc.with_ymd_and_hms(2026, 3, 10, 8, 0, 0).unwrap());
    let service = app.token(999, Role::Service);
    for (user, points) in [(1_i64, 5_i64), (2, 40), (3, 30), (4, 20), (5, 10)] {
        app.data(
            Some(&service),
            "mutation($u: ID!, $p: Int!, $k: String!) {
                awardPoints(userId: $u, type: LEARNING, points: $p, idempotencyKey: $k) { awarded } }",
            json!({ "u": user.to_string(), "p": points, "k": format!("march-{user}") }),
        )
        .await;
    }
    // The season board is the built-in board `season`, its points the score.
    let live = page(&app, None, "season", None).await;
    assert_eq!(live["period"], "2026-03");
    let expected = vec![(1, 2, 40), (2, 3, 30), (3, 4, 20), (4, 5, 10), (5, 1, 5)];
    assert_eq!(ranks(&live), expected);
    let listed = app
        .data(
            None,
            "{ boards(first: 5) { edges { node { key reset operator order rewards { fromRank toRank points } } } } }",
            json!({}),
        )
        .await;
    assert_eq!(
        listed["boards"]["edges"][0]["node"],
        json!({ "key": "season", "reset": "MONTHLY", "operator": "INCREMENT", "order": "DESC",
                "rewards": [ { "fromRank": 1, "toRank": 1, "points": 100 },
                             { "fromRank": 2, "toRank": 2, "points": 50 },
                             { "fromRank": 3, "toRank": 3, "points": 20 } ] })
    );
    let refused = submit_as(&app, &service, "season", 1, 10, 0).await;
    assert_eq!(first_code(&refused), "BAD_USER_INPUT");

    app.set_clock(Utc.with_ymd_and_hms(2026, 4, 1, 8, 0, 0).unwrap());
    let march = Month::parse_id("202603").unwrap();
    let stopped = app
        .leaderboards()
        .archive_season(
            march,
            Options {
                stop_after_payments: Some(1),
                ..Options::default()
            },
        )
        .await;
    assert!(stopped.is_err(), "a run stopped while paying is unfinished");
    let sibling = app.spawn_sibling().await;
    let (a, b) = tokio::join!(
        app.leaderboards().archive_season(march, Options::default()),
        sibling
            .leaderboards()
            .archive_season(march, Options::default()),
    );
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    app.leaderboards()
        .archive_season(march, Options::default())
        .await
        .unwrap();
    assert_eq!(
        ranks(&page(&app, None, "season", Some("2026-03")).await),
        expected
    );
    let paid = wait_for_rewards(&app, "season", "2026-03", 3).await;
    assert_eq!(
        paid.iter().map(|(u, p, _)| (*u, *p)).collect::<Vec<_>>(),
        vec![(2, 100), (3, 50), (4, 20)]
    );
    // Paid once each: April's board holds exactly the rewards.
    let points = season_points(&app).await;
    assert_eq!(points, vec![(2, 100), (3, 50), (4, 20)]);

    // A cheater removed from the archived season: everyone below moves up, winners too.
    let removed = app
        .data(
            Some(&app.admin_token()),
            "mutation { removeBoardRecord(boardKey: \"season\", userId: \"2\", period: \"2026-03\") }",
            json!({}),
        )
        .await;
    assert_eq!(removed["removeBoardRecord"], true);
    assert_eq!(
        ranks(&page(&app, None, "season", Some("2026-03")).await),
        vec![(1, 3, 30), (2, 4, 20), (3, 5, 10), (4, 1, 5)]
    );
    let winners = app
        .data(
            None,
            "{ seasons { id winners { rank user { id } } } }",
            json!({}),
        )
        .await;
    let march = winners["seasons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == global_id("Season", "202603"))
        .unwrap()["winners"]
        .clone();
    assert_eq!(march[0]["user"]["id"], global_id("User", 3));
    // A season that has not begun has no board to remove anyone from.
    let later = app
        .gql(
            Some(&app.admin_token()),
            "mutation { removeBoardRecord(boardKey: \"season\", userId: \"2\", period: \"2027-01\") }",
            json!({}),
        )
        .await;
    assert_eq!(first_code(&later), "BAD_USER_INPUT");
}

const REMOVE: &str = "mutation($u: ID!) { removeBoardRecord(boardKey: \"season\", userId: $u) }";
const LEARNING: &str = "mutation($u: ID!, $p: Int!, $k: String!) {
    awardPoints(userId: $u, type: LEARNING, points: $p, idempotencyKey: $k) { awarded } }";

/// (rank, user, points) of the live season's board.
async fn season_board(app: &TestApp) -> Vec<(i64, i64, i64)> {
    ranks(&page(app, None, "season", None).await)
}

async fn balance_of(app: &TestApp, user: i64) -> i64 {
    app.data(
        Some(&app.admin_token()),
        "query($u: ID!) { node(id: $u) { ... on User { pointsBalance { balance } } } }",
        json!({ "u": global_id("User", user) }),
    )
    .await["node"]["pointsBalance"]["balance"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn a_user_removed_from_the_live_season_stays_off_it_through_awards_rebuild_and_rollover() {
    use engage::{features::leaderboard::rollover::Options, infra::clock::Month};

    use crate::harness::streams_settled;

    let app = app().await;
    app.set_clock(Utc.with_ymd_and_hms(2026, 5, 10, 12, 0, 0).unwrap());
    let service = app.token(999, Role::Service);
    let award = async |user: i64, points: i64, key: &str| {
        app.data(
            Some(&service),
            LEARNING,
            json!({ "u": user.to_string(), "p": points, "k": key }),
        )
        .await;
    };
    award(2, 40, "a").await;
    award(3, 30, "b").await;
    award(4, 20, "c").await;
    assert_eq!(
        season_board(&app).await,
        vec![(1, 2, 40), (2, 3, 30), (3, 4, 20)]
    );

    let admin = app.admin_token();
    let removed = app.data(Some(&admin), REMOVE, json!({ "u": "2" })).await;
    assert_eq!(removed["removeBoardRecord"], true);
    assert_eq!(season_board(&app).await, vec![(1, 3, 30), (2, 4, 20)]);
    let again = app.data(Some(&admin), REMOVE, json!({ "u": "2" })).await;
    assert_eq!(again["removeBoardRecord"], false, "removed once");
    let recorded: i64 = sqlx::query(
        "SELECT COUNT(*) AS n FROM season_removals WHERE season = 202605 AND user_id = 2",
    )
    .fetch_one(app.sql())
    .await
    .unwrap()
    .get("n");
    assert_eq!(recorded, 1);

    // The rest of the season's awards count toward the balance, never the board: an award
    // and a sign-in alike.
    award(2, 10, "d").await;
    app.data(
        Some(&app.user_token(2)),
        "mutation { signIn { pointsAwarded } }",
        json!({}),
    )
    .await;
    assert_eq!(balance_of(&app, 2).await, 51);
    assert_eq!(season_board(&app).await, vec![(1, 3, 30), (2, 4, 20)]);

    // A rebuild after a loss of Redis leaves the user off, and later awards too.
    streams_settled(&app, &app.keys().points_streams(), "archive").await;
    let keys = scan(&app, &app.keys().all_pattern()).await;
    unlink(&app, &keys).await;
    app.rebuild_from_sql().await.unwrap();
    assert_eq!(season_board(&app).await, vec![(1, 3, 30), (2, 4, 20)]);
    // (The next day: LEARNING's cap of 50 was reached.)
    app.set_clock(Utc.with_ymd_and_hms(2026, 5, 11, 12, 0, 0).unwrap());
    award(2, 5, "e").await;
    assert_eq!(season_board(&app).await, vec![(1, 3, 30), (2, 4, 20)]);
    assert_eq!(balance_of(&app, 2).await, 56);
    let drift: u64 = app
        .verify_all()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.feature == "season boards")
        .map(|r| r.drifted)
        .sum();
    assert_eq!(drift, 0);

    // The rollover archives the season without the user, and pays the rewards by it.
    app.set_clock(Utc.with_ymd_and_hms(2026, 6, 1, 8, 0, 0).unwrap());
    app.leaderboards()
        .archive_season(Month::parse_id("202605").unwrap(), Options::default())
        .await
        .unwrap();
    assert_eq!(
        ranks(&page(&app, None, "season", Some("2026-05")).await),
        vec![(1, 3, 30), (2, 4, 20)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn board_changes_are_pushed_at_most_once_a_second_with_one_read_for_all_subscribers() {
    use crate::harness::{next_data, subscribe};
    let app = app().await;
    create(
        &app,
        json!({ "key": "live", "title": "Live", "reset": "NEVER" }),
    )
    .await;
    submit(&app, "live", 1, 10, 0).await;
    let query = "subscription { boardChanged(key: \"live\", top: 3) { period total records { rank score } } }";
    let mut sockets = Vec::new();
    for _ in 0..10 {
        let mut socket = subscribe(&app, None, query).await;
        let first = next_data(&mut socket).await;
        assert_eq!(first["boardChanged"]["total"], 1, "{first}");
        sockets.push(socket);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let before = app.redis_round_trips();
    let started = std::time::Instant::now();
    // A burst of changes: one read, one snapshot per subscriber within the second.
    for user in 2..=6_i64 {
        submit(&app, "live", user, user * 10, 0).await;
    }
    let mut firsts = Vec::new();
    for socket in &mut sockets {
        let change = next_data(socket).await;
        firsts.push(change["boardChanged"]["total"].as_i64().unwrap());
    }
    // Whatever the first snapshot caught, the last one has all six within a second more.
    for (socket, first) in sockets.iter_mut().zip(firsts) {
        if first < 6 {
            let change = next_data(socket).await;
            assert_eq!(change["boardChanged"]["total"], 6, "{change}");
        }
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(4));
    // Five submissions (a script call and a few reads each) and at most two shared reads
    // of the board (two pipelines each), not one per subscriber.
    let trips = app.redis_round_trips() - before;
    assert!(trips < 5 * 6 + 2 * 4, "{trips} round trips");
}

#[tokio::test]
async fn my_board_rank_is_pushed_only_when_it_moves() {
    use crate::harness::{next_data, subscribe};
    let app = app().await;
    create(
        &app,
        json!({ "key": "mine", "title": "Mine", "reset": "NEVER" }),
    )
    .await;
    submit(&app, "mine", 5, 50, 0).await;
    submit(&app, "mine", 6, 10, 0).await;
    let token = app.user_token(5);
    let mut socket = subscribe(
        &app,
        Some(&token),
        "subscription { myBoardRankChanged(key: \"mine\") { rank score } }",
    )
    .await;
    assert_eq!(
        next_data(&mut socket).await["myBoardRankChanged"],
        json!({ "rank": 1, "score": 50 })
    );
    // Someone below moves but stays below: nothing is pushed.
    submit(&app, "mine", 6, 20, 0).await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    // Someone overtakes: rank 2.
    submit(&app, "mine", 7, 100, 0).await;
    assert_eq!(
        next_data(&mut socket).await["myBoardRankChanged"],
        json!({ "rank": 2, "score": 50 })
    );
}

#[tokio::test]
async fn a_period_past_its_reset_and_a_tournament_past_its_end_are_closed_and_paid() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    create(
        &app,
        json!({ "key": "day", "title": "Day", "reset": "DAILY",
                "rewards": [ { "fromRank": 1, "toRank": 2, "points": 10 } ] }),
    )
    .await;
    create(
        &app,
        json!({ "key": "sprint", "title": "Sprint", "reset": "NEVER",
                "endsAt": (start + chrono::Duration::hours(1)).to_rfc3339(),
                "rewards": [ { "fromRank": 1, "toRank": 1, "points": 40 } ] }),
    )
    .await;
    for user in 1..=3_i64 {
        submit(&app, "day", user, user, 0).await;
        submit(&app, "sprint", user, 10 * user, 0).await;
    }
    // Nothing is due yet.
    app.boards().close_due().await.unwrap();
    assert!(rewards_paid(&app, "day", "2026-11-23").await.is_empty());

    app.set_clock(start + chrono::Duration::days(1));
    app.boards().close_due().await.unwrap();
    let day = wait_for_rewards(&app, "day", "2026-11-23", 2).await;
    assert_eq!(
        day.iter().map(|(u, p, _)| (*u, *p)).collect::<Vec<_>>(),
        vec![(3, 10), (2, 10)]
    );
    let sprint = wait_for_rewards(&app, "sprint", "all", 1).await;
    assert_eq!(
        sprint.iter().map(|(u, p, _)| (*u, *p)).collect::<Vec<_>>(),
        vec![(3, 40)]
    );
    // The ended tournament keeps its name and reads from the archive; the day turned.
    let final_standings = page(&app, None, "sprint", None).await;
    assert_eq!(final_standings["period"], "all");
    assert_eq!(
        ranks(&final_standings),
        vec![(1, 3, 30), (2, 2, 20), (3, 1, 10)]
    );
    assert_eq!(page(&app, None, "day", None).await["period"], "2026-11-24");
    assert_eq!(
        ranks(&page(&app, None, "day", Some("2026-11-23")).await),
        vec![(1, 3, 3), (2, 2, 2), (3, 1, 1)]
    );
    // A second check pays nothing more.
    app.boards().close_due().await.unwrap();
    assert_eq!(rewards_paid(&app, "day", "2026-11-23").await.len(), 2);
}

/// The open periods `close_due` reads: (board, period, closing time).
async fn open_periods(app: &TestApp) -> Vec<(String, String, Option<i64>)> {
    sqlx::query(
        "SELECT board_key, period, closes_at_ms FROM board_open_periods ORDER BY board_key, period",
    )
    .fetch_all(app.sql())
    .await
    .unwrap()
    .iter()
    .map(|row| {
        (
            row.get("board_key"),
            row.get("period"),
            row.get("closes_at_ms"),
        )
    })
    .collect()
}

#[tokio::test]
async fn close_due_reads_only_the_periods_whose_closing_time_passed_and_closes_each_once() {
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    for (key, reset) in [("d", "DAILY"), ("w", "WEEKLY"), ("n", "NEVER")] {
        create(&app, json!({ "key": key, "title": key, "reset": reset })).await;
        submit(&app, key, 1, 5, 0).await;
        submit(&app, key, 2, 7, 0).await;
    }
    let midnight = Utc.with_ymd_and_hms(2026, 11, 24, 0, 0, 0).unwrap();
    let monday = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
    assert_eq!(
        open_periods(&app).await,
        vec![
            (
                "d".into(),
                "2026-11-23".into(),
                Some(midnight.timestamp_millis())
            ),
            ("n".into(), "all".into(), None),
            (
                "w".into(),
                "2026-W48".into(),
                Some(monday.timestamp_millis())
            ),
        ]
    );
    app.set_clock(midnight);
    // Both instances at midnight: the sibling's own clock would be today's, past the week.
    let sibling = app.spawn_sibling().await;
    sibling.set_clock(midnight);
    let (a, b) = tokio::join!(app.boards().close_due(), sibling.boards().close_due());
    a.unwrap();
    b.unwrap();
    // The day closed, once; the week and the board that never resets stay open.
    let closed: Vec<(String, String)> =
        sqlx::query("SELECT board_key, period FROM board_periods ORDER BY board_key")
            .fetch_all(app.sql())
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get("board_key"), row.get("period")))
            .collect();
    assert_eq!(closed, vec![("d".to_string(), "2026-11-23".to_string())]);
    assert_eq!(open_periods(&app).await.len(), 2);
    assert_eq!(
        ranks(&page(&app, None, "d", Some("2026-11-23")).await),
        vec![(1, 2, 7), (2, 1, 5)]
    );
    // The next day's first submission opens its period.
    submit(&app, "d", 1, 1, 0).await;
    assert!(open_periods(&app).await.contains(&(
        "d".into(),
        "2026-11-24".into(),
        Some((midnight + chrono::Duration::days(1)).timestamp_millis())
    )));
}

#[tokio::test]
async fn a_period_whose_redis_board_is_gone_before_it_is_marked_done_reads_from_sql() {
    let app = app().await;
    app.set_clock(Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap());
    create(&app, json!({ "key": "d", "title": "d", "reset": "DAILY" })).await;
    submit(&app, "d", 1, 5, 0).await;
    submit(&app, "d", 2, 7, 0).await;
    app.set_clock(Utc.with_ymd_and_hms(2026, 11, 24, 0, 0, 0).unwrap());
    app.boards().close_due().await.unwrap();
    // As a crash after the unlink and before the last mark leaves it (or a reader sees it
    // while the archive runs): the copy verified, the Redis board gone.
    sqlx::query("UPDATE board_periods SET status = 'verified' WHERE board_key = 'd'")
        .execute(app.sql())
        .await
        .unwrap();
    assert_eq!(
        ranks(&page(&app, None, "d", Some("2026-11-23")).await),
        vec![(1, 2, 7), (2, 1, 5)]
    );
    // The next check finishes it, and it reads the same.
    app.boards().close_due().await.unwrap();
    let status: String = sqlx::query("SELECT status FROM board_periods WHERE board_key = 'd'")
        .fetch_one(app.sql())
        .await
        .unwrap()
        .get("status");
    assert_eq!(status, "done");
    assert_eq!(
        ranks(&page(&app, None, "d", Some("2026-11-23")).await),
        vec![(1, 2, 7), (2, 1, 5)]
    );
}

#[tokio::test]
async fn a_watched_board_moves_to_its_next_period_when_it_turns() {
    use crate::harness::{next_data, subscribe};
    let app = app().await;
    let start = Utc.with_ymd_and_hms(2026, 11, 23, 8, 0, 0).unwrap();
    app.set_clock(start);
    create(
        &app,
        json!({ "key": "today", "title": "Today", "reset": "DAILY" }),
    )
    .await;
    submit(&app, "today", 1, 10, 0).await;
    let mut socket = subscribe(
        &app,
        None,
        "subscription { boardChanged(key: \"today\") { period total } }",
    )
    .await;
    assert_eq!(
        next_data(&mut socket).await["boardChanged"],
        json!({ "period": "2026-11-23", "total": 1 })
    );
    app.set_clock(start + chrono::Duration::days(1));
    assert_eq!(
        next_data(&mut socket).await["boardChanged"],
        json!({ "period": "2026-11-24", "total": 0 })
    );
    submit(&app, "today", 2, 10, 0).await;
    assert_eq!(
        next_data(&mut socket).await["boardChanged"],
        json!({ "period": "2026-11-24", "total": 1 })
    );
}
