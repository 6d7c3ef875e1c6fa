//! Points: caps under concurrency, idempotency, the intake stream, likes received, history.

use std::time::Duration;

use engage::{
    features::{
        points::{events::IntakeAward, PointsType},
        remarks::events::VoteEvent,
    },
    infra::{
        auth::Role,
        streams::{self, Event},
    },
};
use serde_json::{json, Value};

use crate::harness::{self, eventually, first_code, local_id, TestApp};

const AWARD: &str = "mutation($u: ID!, $t: PointsType!, $p: Int!, $k: String!) {
    awardPoints(userId: $u, type: $t, points: $p, idempotencyKey: $k) { awarded capped duplicate } }";
const TODAY: &str = "{ pointsToday { type points cap } }";

async fn unlimited() -> TestApp {
    TestApp::spawn_with(harness::unlimited).await
}

/// A LEARNING award as another service sends it to `{points}:intake`.
async fn intake(app: &TestApp, user: i64, points: i64, key: &str) {
    let asked = IntakeAward {
        user_id: user,
        kind: PointsType::Learning,
        points,
        key: key.to_string(),
    };
    let stream = app.keys().points_intake_stream();
    streams::publish(app.infra(), &stream, &asked)
        .await
        .unwrap();
}

/// A remark on a new item by the holder of `token`; its id.
async fn remark_by(app: &TestApp, token: &str) -> String {
    let item = app.create_item().await;
    app.data(
        Some(token),
        "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 5, content: \"ok\" }) { id } }",
        json!({ "i": item }),
    )
    .await["createRemark"]["id"]
    .as_str()
    .unwrap()
    .to_string()
}

/// Waits until `token`'s user has `awards` awards in the points history, which SQL answers:
/// the points archive has written them.
async fn history_holds(app: &TestApp, token: &str, awards: usize) {
    let history = "{ pointsHistory(first: 20) { edges { node { type } } } }";
    eventually(async || {
        app.data(Some(token), history, json!({})).await["pointsHistory"]["edges"]
            .as_array()
            .unwrap()
            .len()
            == awards
    })
    .await;
}

fn points_of(today: &Value, kind: &str) -> i64 {
    today["pointsToday"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == kind)
        .unwrap()["points"]
        .as_i64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_concurrent_awards_never_exceed_the_daily_cap() {
    let app = std::sync::Arc::new(unlimited().await);
    let service = app.token(900, Role::Service);
    let awards: Vec<_> = (0..500)
        .map(|i| {
            let (app, service) = (app.clone(), service.clone());
            tokio::spawn(async move {
                let variables =
                    json!({ "u": "41", "t": "ANSWER", "p": 5, "k": format!("answer-{i}") });
                app.data(Some(&service), AWARD, variables).await["awardPoints"]["awarded"]
                    .as_i64()
                    .unwrap()
            })
        })
        .collect();
    let mut total = 0;
    for award in awards {
        total += award.await.unwrap();
    }
    assert_eq!(total, 20, "ANSWER is capped at 20 a day");
    let today = app.data(Some(&app.user_token(41)), TODAY, json!({})).await;
    assert_eq!(points_of(&today, "ANSWER"), 20);
    let answer = today["pointsToday"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "ANSWER")
        .unwrap()
        .clone();
    assert_eq!(answer["cap"], 20);
}

#[tokio::test]
async fn an_idempotency_key_awards_once_and_a_partial_award_reaches_the_cap() {
    let app = unlimited().await;
    let service = app.token(900, Role::Service);
    let award = |key: &'static str, points: i64| {
        let variables = json!({ "u": "42", "t": "NOTE", "p": points, "k": key });
        let app = &app;
        let service = service.clone();
        async move { app.data(Some(&service), AWARD, variables).await["awardPoints"].clone() }
    };
    assert_eq!(
        award("note-1", 15).await,
        json!({ "awarded": 15, "capped": false, "duplicate": false })
    );
    assert_eq!(
        award("note-1", 15).await,
        json!({ "awarded": 15, "capped": false, "duplicate": true })
    );
    assert_eq!(
        award("note-2", 15).await,
        json!({ "awarded": 5, "capped": true, "duplicate": false })
    );
    assert_eq!(
        award("note-3", 3).await,
        json!({ "awarded": 0, "capped": true, "duplicate": false })
    );

    let user = app
        .gql(
            Some(&app.user_token(43)),
            AWARD,
            json!({ "u": "43", "t": "NOTE", "p": 3, "k": "x" }),
        )
        .await;
    assert_eq!(
        first_code(&user),
        "FORBIDDEN",
        "users cannot award themselves"
    );
    for (points, key) in [(0, "k"), (-3, "k"), (10_001, "k"), (3, "")] {
        let body = app
            .gql(
                Some(&service),
                AWARD,
                json!({ "u": "42", "t": "NOTE", "p": points, "k": key }),
            )
            .await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{points} {key:?}");
    }
}

#[tokio::test]
async fn other_services_award_through_the_intake_stream_idempotently() {
    let app = unlimited().await;
    for _ in 0..2 {
        intake(&app, 44, 10, "lesson-7").await;
    }
    let token = app.user_token(44);
    eventually(async || {
        points_of(&app.data(Some(&token), TODAY, json!({})).await, "LEARNING") == 10
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        points_of(&app.data(Some(&token), TODAY, json!({})).await, "LEARNING"),
        10,
        "the repeat is ignored"
    );
}

#[tokio::test]
async fn authors_earn_points_for_likes_from_others_but_not_from_themselves() {
    let app = unlimited().await;
    let author = app.user_token(45);
    let remark = remark_by(&app, &author).await;
    let like = "mutation($r: ID!) { likeRemark(remarkId: $r) { changed } }";
    app.data(Some(&author), like, json!({ "r": remark })).await;
    app.data(Some(&app.user_token(46)), like, json!({ "r": remark }))
        .await;
    app.data(Some(&app.user_token(47)), like, json!({ "r": remark }))
        .await;
    // Unliking and liking again earns nothing more.
    app.data(
        Some(&app.user_token(47)),
        "mutation($r: ID!) { unlikeRemark(remarkId: $r) { changed } }",
        json!({ "r": remark }),
    )
    .await;
    app.data(Some(&app.user_token(47)), like, json!({ "r": remark }))
        .await;

    eventually(async || {
        points_of(
            &app.data(Some(&author), TODAY, json!({})).await,
            "LIKE_RECEIVED",
        ) == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let today = app.data(Some(&author), TODAY, json!({})).await;
    assert_eq!(
        points_of(&today, "LIKE_RECEIVED"),
        4,
        "two others liked: 2 points each"
    );
    assert_eq!(
        points_of(&today, "REMARK"),
        10,
        "writing the remark earned 10"
    );

    // Every award reaches the archive and the history.
    history_holds(&app, &author, 3).await;
    let history = "{ pointsHistory(first: 10) { edges { node { type points seasonId awardedAt } } pageInfo { hasNextPage } } }";
    let page = app.data(Some(&author), history, json!({})).await;
    // Two consumers award these (one reads the likes, one the remarks): the history is in
    // the order the awards were made, which neither waits for the other to decide.
    let mut kinds: Vec<&str> = page["pointsHistory"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["type"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["LIKE_RECEIVED", "LIKE_RECEIVED", "REMARK"]);
}

#[tokio::test]
async fn a_like_received_award_is_paid_once_even_after_its_redis_marker_expired() {
    let app = unlimited().await;
    let author = app.user_token(45);
    let remark = remark_by(&app, &author).await;
    let liker = app.user_token(46);
    let like = "mutation($r: ID!) { likeRemark(remarkId: $r) { changed } }";
    let unlike = "mutation($r: ID!) { unlikeRemark(remarkId: $r) { changed } }";
    app.data(Some(&liker), like, json!({ "r": remark })).await;
    history_holds(&app, &author, 2).await;

    // A week later the Redis marker is gone; the liker unlikes and likes again.
    let mut conn = app.redis_connection().await;
    let marker = app
        .keys()
        .points_award_marker(45, &format!("like:{}:46", local_id(&remark)));
    let removed: i64 = redis::cmd("DEL")
        .arg(&marker)
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(removed, 1, "the marker existed");
    drop(conn);
    app.data(Some(&liker), unlike, json!({ "r": remark })).await;
    app.data(Some(&liker), like, json!({ "r": remark })).await;
    let votes: Vec<String> = (0..app.remark_shards())
        .map(|s| app.keys().vote_stream(s))
        .collect();
    crate::harness::streams_settled(&app, &votes, "points").await;
    assert_eq!(
        points_of(
            &app.data(Some(&author), TODAY, json!({})).await,
            "LIKE_RECEIVED"
        ),
        2,
        "paid once"
    );
}

/// Each vote event of a remark, in stream order: (voter, a like, the voter's first vote).
async fn first_votes(app: &TestApp, remark: &str) -> Vec<(i64, bool, bool)> {
    let id: i64 = local_id(remark);
    let stream = app.keys().vote_stream_of(id, app.remark_shards());
    streams::range(app.infra(), &stream)
        .await
        .unwrap()
        .iter()
        .map(|entry| VoteEvent::from_entry(entry).unwrap())
        .filter(|vote| vote.remark_id == id)
        .map(|vote| (vote.voter_id, vote.liked, vote.first_vote))
        .collect()
}

#[tokio::test]
async fn only_a_likers_first_vote_skips_asking_sql_whether_its_author_was_paid() {
    let app = unlimited().await;
    let author = app.user_token(45);
    let remark = remark_by(&app, &author).await;
    let like = "mutation($r: ID!) { likeRemark(remarkId: $r) { changed } }";
    let unlike = "mutation($r: ID!) { unlikeRemark(remarkId: $r) { changed } }";
    app.data(Some(&app.user_token(46)), like, json!({ "r": remark }))
        .await;
    app.data(Some(&app.user_token(46)), unlike, json!({ "r": remark }))
        .await;
    let shards = app.remark_shards();
    let votes: Vec<String> = (0..shards).map(|s| app.keys().vote_stream(s)).collect();
    crate::harness::streams_settled(&app, &votes, "archive").await;
    // The award (and the remark's) in SQL.
    history_holds(&app, &author, 2).await;

    // Eleven days on the remark is older than its relation keys live, and Redis has let the
    // liker's relation key and the award's marker go: the archive answers for the relation,
    // and SQL alone knows the award was paid.
    app.advance_clock(chrono::Duration::days(11));
    let keys = &app.keys();
    let id: i64 = local_id(&remark);
    let mut conn = app.redis_connection().await;
    let () = redis::cmd("DEL")
        .arg(keys.like_relation(id, 46, shards))
        .arg(keys.points_award_marker(45, &format!("like:{}:46", local_id(&remark))))
        .query_async(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    app.data(Some(&app.user_token(46)), like, json!({ "r": remark }))
        .await;
    // A liker the archive has never seen is a first vote, on an old remark too.
    app.data(Some(&app.user_token(47)), like, json!({ "r": remark }))
        .await;

    assert_eq!(
        first_votes(&app, &remark).await,
        [
            (46, true, true),
            (46, false, false),
            (46, true, false),
            (47, true, true)
        ]
    );
    crate::harness::streams_settled(&app, &votes, "points").await;
    assert_eq!(
        points_of(
            &app.data(Some(&author), TODAY, json!({})).await,
            "LIKE_RECEIVED"
        ),
        2,
        "today: the new liker's 2 points, nothing for the liker paid eleven days ago"
    );
}

#[tokio::test]
async fn award_points_and_the_intake_stream_share_keys_that_never_collide_with_internal_ones() {
    let app = unlimited().await;
    let service = app.token(9, Role::Service);
    let award = "mutation($u: ID!, $k: String!) { awardPoints(userId: $u, type: LEARNING, points: 5, idempotencyKey: $k) { awarded duplicate } }";
    intake(&app, 44, 5, "lesson-9").await;
    crate::harness::streams_settled(&app, &[app.keys().points_intake_stream()], "intake").await;
    let again = app
        .data(Some(&service), award, json!({ "u": "44", "k": "lesson-9" }))
        .await;
    assert_eq!(again["awardPoints"]["duplicate"], true, "{again}");

    // A service key that spells an internal one is a key of its own.
    let author = app.user_token(45);
    let remark = remark_by(&app, &author).await;
    for key in [
        "signin:45:2026-11-23".to_string(),
        format!("like:{remark}:46"),
    ] {
        let first = app
            .data(Some(&service), award, json!({ "u": "45", "k": key }))
            .await;
        assert_eq!(first["awardPoints"]["duplicate"], false, "{key}: {first}");
    }
    app.data(
        Some(&app.user_token(46)),
        "mutation($r: ID!) { likeRemark(remarkId: $r) { changed } }",
        json!({ "r": remark }),
    )
    .await;
    eventually(async || {
        points_of(
            &app.data(Some(&author), TODAY, json!({})).await,
            "LIKE_RECEIVED",
        ) == 2
    })
    .await;
}

#[tokio::test]
async fn a_batch_of_awards_across_buckets_pays_each_key_once_within_the_cap() {
    let app = TestApp::spawn_with(|config| {
        harness::unlimited(config);
        config.points.points_buckets = Some(3);
    })
    .await;
    let users = [60, 61, 62, 63];
    // Eight LEARNING awards of 10 to each user (80, over the cap of 50), each sent twice,
    // interleaved across the users and so across the buckets: the consumer reads them in
    // batches that mix buckets and repeat keys.
    for _ in 0..2 {
        for i in 0..8 {
            for user in users {
                intake(&app, user, 10, &format!("lesson-{user}-{i}")).await;
            }
        }
    }
    crate::harness::streams_settled(&app, &[app.keys().points_intake_stream()], "intake").await;
    let history = "{ pointsHistory(first: 20) { edges { node { type points } } } }";
    for user in users {
        let token = app.user_token(user);
        assert_eq!(
            points_of(&app.data(Some(&token), TODAY, json!({})).await, "LEARNING"),
            50,
            "user {user}: the first five awards, the cap"
        );
        eventually(async || {
            let paid = app.data(Some(&token), history, json!({})).await;
            let edges = paid["pointsHistory"]["edges"].as_array().unwrap().clone();
            edges.len() == 5 && edges.iter().all(|e| e["node"]["points"] == 10)
        })
        .await;
    }
}
