//! Mutation payloads: every mutation answers the objects it changed, as a fresh query reads
//! them after it, so that a client's normalised cache stays right; the fields they succeed
//! still answer as before, marked deprecated.

use chrono::NaiveDate;
use engage::infra::auth::Role;
use serde_json::{json, Value};

use crate::harness::{first_code, streams_settled, TestApp};

/// The signed-in user's id, as the API names it (their first sight, too).
async fn user_id(app: &TestApp, token: &str) -> String {
    app.data(Some(token), "{ viewer { id } }", json!({})).await["viewer"]["id"]
        .as_str()
        .expect("a viewer id")
        .to_string()
}

// Likes.

const VOTE: &str = "mutation($id: ID!, $like: Boolean!) {
    like: likeRemark(remarkId: $id) @include(if: $like) { ...vote }
    unlike: unlikeRemark(remarkId: $id) @skip(if: $like) { ...vote } }
    fragment vote on LikeResult { changed remarkId likeCount liked remark { id likeCount likedByMe } }";

const REMARKS: &str =
    "query($item: ID!) { remarks(itemId: $item) { edges { node { id likeCount likedByMe } } } }";

async fn remark_by(app: &TestApp, author: &str, item: &str) -> String {
    let create = "mutation($item: ID!) { createRemark(input: { itemId: $item, score: 5, content: \"Fine tea\" }) { id } }";
    app.data(Some(author), create, json!({ "item": item }))
        .await["createRemark"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn vote(app: &TestApp, voter: &str, remark: &str, like: bool) -> Value {
    let data = app
        .data(Some(voter), VOTE, json!({ "id": remark, "like": like }))
        .await;
    data[if like { "like" } else { "unlike" }].clone()
}

/// The remark as the voter's fresh query of the item's remarks reads it.
async fn fresh_remark(app: &TestApp, viewer: &str, item: &str, remark: &str) -> Value {
    let data = app
        .data(Some(viewer), REMARKS, json!({ "item": item }))
        .await;
    data["remarks"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"].clone())
        .find(|node| node["id"] == remark)
        .expect("the remark on its item's page")
}

#[tokio::test]
async fn like_and_unlike_answer_the_remark_as_a_fresh_query_reads_it() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    let remark = remark_by(&app, &app.user_token(1), &item).await;
    let (first, second) = (app.user_token(2), app.user_token(3));

    // Each step: (voter, like?, changed, the remark's count after, whether the voter likes it).
    for (voter, like, changed, count, liked) in [
        (&first, true, true, 1, true),
        (&second, true, true, 2, true),
        (&first, true, false, 2, true),
        (&first, false, true, 1, false),
        (&first, false, false, 1, false),
    ] {
        let answer = vote(&app, voter, &remark, like).await;
        let fresh = fresh_remark(&app, voter, &item, &remark).await;
        assert_eq!(answer["remark"], fresh, "{answer}");
        assert_eq!(answer["changed"], changed, "{answer}");
        assert_eq!(answer["remark"]["likeCount"], count, "{answer}");
        assert_eq!(answer["remark"]["likedByMe"], liked, "{answer}");
        // The deprecated fields answer what they always did.
        assert_eq!(answer["remarkId"], answer["remark"]["id"]);
        assert_eq!(answer["likeCount"], answer["remark"]["likeCount"]);
        assert_eq!(answer["liked"], answer["remark"]["likedByMe"]);
    }
}

#[tokio::test]
async fn the_liked_remark_costs_no_redis_round_trip_beyond_the_vote() {
    // Periodic background work shares the pool: slow it down so that only the votes count.
    let app = TestApp::spawn_with(|config| {
        config.jobs.jobs_tick_ms = 600_000;
        config.leaderboard.rollover_check_seconds = 3600;
    })
    .await;
    let item = app.create_item().await;
    let remark = remark_by(&app, &app.user_token(1), &item).await;
    let voter = app.user_token(2);
    vote(&app, &voter, &remark, true).await;
    let users = app.users();
    crate::harness::eventually(async || users.first_sights_queued() == 0).await;
    streams_settled(&app, &[app.keys().remark_stream()], "fanout").await;
    let streams = app.remarks().vote_streams();
    streams_settled(&app, &streams, "archive").await;

    // Repeated likes change nothing, so no consumer reacts while they are counted.
    // The fewest of three runs: background work that slips in only adds.
    let round_trips = async |query: &str| {
        let mut fewest = u64::MAX;
        for _ in 0..3 {
            let before = app.redis_round_trips();
            app.data(Some(&voter), query, json!({ "id": remark })).await;
            let spent = app.redis_round_trips() - before;
            fewest = fewest.min(spent);
        }
        fewest
    };
    let bare = round_trips("mutation($id: ID!) { likeRemark(remarkId: $id) { changed } }").await;
    let with_remark = round_trips(
        "mutation($id: ID!) { likeRemark(remarkId: $id) { changed remark { id likeCount likedByMe } } }",
    )
    .await;
    assert_eq!(
        with_remark, bare,
        "the remark's like fields come from the vote's script"
    );
}

// Sign-in.

/// Fields of the calendar that a payload and a fresh query must agree on.
const CALENDAR_FIELDS: &str = "month days signedDays makeUpsLeft";

fn sign_in_query() -> String {
    format!(
        "mutation {{ signIn {{ date streak pointsAwarded alreadySigned calendar {{ {CALENDAR_FIELDS} }} }} }}"
    )
}

fn make_up_query() -> String {
    format!(
        "mutation($d: String!) {{ makeUpSignIn(date: $d) {{ date streak pointsAwarded alreadySigned calendar {{ {CALENDAR_FIELDS} }} }} }}"
    )
}

async fn fresh_calendar(app: &TestApp, token: &str) -> Value {
    let query = format!("{{ signCalendar {{ {CALENDAR_FIELDS} }} }}");
    app.data(Some(token), &query, json!({})).await["signCalendar"].clone()
}

fn days(calendar: &Value) -> Vec<bool> {
    calendar["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|day| day.as_bool().unwrap())
        .collect()
}

#[tokio::test]
async fn sign_in_and_make_up_answer_the_months_calendar_after_the_call() {
    let app = TestApp::spawn().await;
    let token = app.user_token(4);
    let on = |day: u32| NaiveDate::from_ymd_opt(2026, 3, day).unwrap();
    app.set_clock(on(9).and_hms_opt(10, 0, 0).unwrap().and_utc());
    app.data(Some(&token), &sign_in_query(), json!({})).await;
    app.set_clock(on(10).and_hms_opt(10, 0, 0).unwrap().and_utc());

    let signed = app.data(Some(&token), &sign_in_query(), json!({})).await["signIn"].clone();
    assert_eq!(signed["calendar"], fresh_calendar(&app, &token).await);
    let mut expected = vec![false; 10];
    expected[8] = true;
    expected[9] = true;
    assert_eq!(days(&signed["calendar"]), expected);
    assert_eq!(signed["calendar"]["signedDays"], 2);
    assert_eq!(
        signed["streak"], 2,
        "the deprecated streak answers as before"
    );
    assert_eq!(signed["alreadySigned"], false);

    let again = app.data(Some(&token), &sign_in_query(), json!({})).await["signIn"].clone();
    assert_eq!(again["alreadySigned"], true);
    assert_eq!(again["calendar"], signed["calendar"]);

    let left = signed["calendar"]["makeUpsLeft"].as_i64().unwrap();
    let made_up = app
        .data(Some(&token), &make_up_query(), json!({ "d": "2026-03-08" }))
        .await["makeUpSignIn"]
        .clone();
    assert_eq!(made_up["calendar"], fresh_calendar(&app, &token).await);
    expected[7] = true;
    assert_eq!(days(&made_up["calendar"]), expected);
    assert_eq!(made_up["calendar"]["signedDays"], 3);
    assert_eq!(made_up["calendar"]["makeUpsLeft"], left - 1);
    assert_eq!(made_up["calendar"]["month"], signed["calendar"]["month"]);
    assert_eq!(made_up["streak"], 3);
    assert_eq!(made_up["pointsAwarded"], 1);
}

// Points.

const AWARD: &str = "mutation($u: ID!, $k: String!, $p: Int!) {
    awardPoints(userId: $u, type: LEARNING, points: $p, idempotencyKey: $k) {
        awarded capped duplicate user { id name } today { type points cap } } }";

#[tokio::test]
async fn an_award_answers_the_user_and_their_total_of_the_type_today_with_its_cap() {
    let app = TestApp::spawn().await;
    let token = app.user_token(5);
    let user = user_id(&app, &token).await;
    let service = app.token(900, Role::Service);
    let fresh_learning = async || {
        let today = app
            .data(
                Some(&token),
                "{ pointsToday { type points cap } }",
                json!({}),
            )
            .await["pointsToday"]
            .clone();
        today
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["type"] == "LEARNING")
            .cloned()
            .unwrap()
    };

    // (key, points asked, awarded, capped, duplicate, LEARNING today after)
    for (key, asked, awarded, capped, duplicate, total) in [
        ("lesson-1", 30, 30, false, false, 30),
        ("lesson-2", 30, 20, true, false, 50),
        ("lesson-1", 30, 30, false, true, 50),
    ] {
        let answer = app
            .data(
                Some(&service),
                AWARD,
                json!({ "u": user, "k": key, "p": asked }),
            )
            .await["awardPoints"]
            .clone();
        assert_eq!(answer["awarded"], awarded, "{answer}");
        assert_eq!(answer["capped"], capped, "{answer}");
        assert_eq!(answer["duplicate"], duplicate, "{answer}");
        assert_eq!(answer["user"]["id"], user.as_str());
        assert!(answer["user"]["name"].is_string(), "{answer}");
        assert_eq!(
            answer["today"],
            json!({ "type": "LEARNING", "points": total, "cap": 50 })
        );
        assert_eq!(answer["today"], fresh_learning().await);
    }
}

// Follows.

const FOLLOW_USER: &str = "mutation($u: ID!) { followUser(userId: $u) { ...follow } }
    fragment follow on FollowPayload { changed user { id followerCount } viewer { id followingCount } }";
const UNFOLLOW_USER: &str = "mutation($u: ID!) { unfollowUser(userId: $u) { ...follow } }
    fragment follow on FollowPayload { changed user { id followerCount } viewer { id followingCount } }";
const COUNTS: &str = "{ viewer { id followerCount followingCount } }";

#[tokio::test]
async fn follow_user_and_unfollow_user_answer_both_users_with_their_new_counts() {
    let app = TestApp::spawn().await;
    let (reader, other, author) = (app.user_token(6), app.user_token(7), app.user_token(8));
    let reader_id = user_id(&app, &reader).await;
    user_id(&app, &other).await;
    let author_id = user_id(&app, &author).await;
    let fresh =
        async |token: &str| app.data(Some(token), COUNTS, json!({})).await["viewer"].clone();

    // (follower, mutation, changed, the author's followers after, the follower's following after)
    for (follower, query, changed, followers, following) in [
        (&reader, FOLLOW_USER, true, 1, 1),
        (&reader, FOLLOW_USER, false, 1, 1),
        (&other, FOLLOW_USER, true, 2, 1),
        (&reader, UNFOLLOW_USER, true, 1, 0),
        (&reader, UNFOLLOW_USER, false, 1, 0),
    ] {
        let data = app
            .data(Some(follower.as_str()), query, json!({ "u": author_id }))
            .await;
        let answer = data
            .get("followUser")
            .or(data.get("unfollowUser"))
            .unwrap()
            .clone();
        assert_eq!(answer["changed"], changed, "{answer}");
        assert_eq!(answer["user"]["id"], author_id.as_str());
        assert_eq!(answer["user"]["followerCount"], followers, "{answer}");
        assert_eq!(answer["viewer"]["followingCount"], following, "{answer}");
        let (author_now, follower_now) = (fresh(&author).await, fresh(follower).await);
        assert_eq!(answer["user"]["followerCount"], author_now["followerCount"]);
        assert_eq!(answer["viewer"]["id"], follower_now["id"]);
        assert_eq!(
            answer["viewer"]["followingCount"],
            follower_now["followingCount"]
        );
    }

    // Two changes in one request: each answers the counts after itself.
    let both = "mutation($u: ID!) {
        on: followUser(userId: $u) { user { followerCount } viewer { followingCount } }
        off: unfollowUser(userId: $u) { user { followerCount } viewer { followingCount } } }";
    let data = app
        .data(Some(&reader), both, json!({ "u": author_id }))
        .await;
    assert_eq!(data["on"]["user"]["followerCount"], 2);
    assert_eq!(data["on"]["viewer"]["followingCount"], 1);
    assert_eq!(data["off"]["user"]["followerCount"], 1);
    assert_eq!(data["off"]["viewer"]["followingCount"], 0);

    // The same rules and errors as the fields they succeed.
    let to_self = app
        .gql(Some(&reader), FOLLOW_USER, json!({ "u": reader_id }))
        .await;
    assert_eq!(first_code(&to_self), "BAD_USER_INPUT", "{to_self}");
    let unknown = app
        .gql(Some(&reader), FOLLOW_USER, json!({ "u": "999999" }))
        .await;
    assert_eq!(first_code(&unknown), "NOT_FOUND", "{unknown}");
    let anonymous = app.gql(None, FOLLOW_USER, json!({ "u": author_id })).await;
    assert_eq!(first_code(&anonymous), "UNAUTHENTICATED", "{anonymous}");
}

#[tokio::test]
async fn follow_and_unfollow_still_answer_whether_they_changed_anything() {
    let app = TestApp::spawn().await;
    let (reader, author) = (app.user_token(9), app.user_token(10));
    user_id(&app, &reader).await;
    let author_id = user_id(&app, &author).await;
    let run = async |field: &str| {
        let query = format!("mutation($u: ID!) {{ {field}(userId: $u) }}");
        app.data(Some(&reader), &query, json!({ "u": author_id }))
            .await[field]
            .clone()
    };
    assert_eq!(run("follow").await, true);
    assert_eq!(run("follow").await, false);
    let counts = app.data(Some(&author), COUNTS, json!({})).await;
    assert_eq!(counts["viewer"]["followerCount"], 1);
    assert_eq!(run("unfollow").await, true);
    assert_eq!(run("unfollow").await, false);
}

// Jobs.

const SCHEDULE: &str = "mutation($id: ID!) { scheduleJob(input: { id: $id, topic: \"mail\", body: \"{}\", delaySeconds: 600 }) { id status } }";
const CANCEL_PENDING: &str =
    "mutation($id: ID!) { cancelPendingJob(topic: \"mail\", id: $id) { cancelled job { id status } } }";
const JOB: &str = "query($id: ID!) { job(topic: \"mail\", id: $id) { id status } }";

#[tokio::test]
async fn cancel_pending_job_answers_the_job_as_it_is_after_the_call() {
    let app = TestApp::spawn().await;
    app.handle_topic("mail");
    let admin = app.admin_token();
    let scheduled = app
        .data(Some(&admin), SCHEDULE, json!({ "id": "payload-1" }))
        .await["scheduleJob"]
        .clone();
    assert_eq!(scheduled["status"], "DELAYED");

    let cancel = async |id: &str| {
        app.data(Some(&admin), CANCEL_PENDING, json!({ "id": id }))
            .await["cancelPendingJob"]
            .clone()
    };
    let first = cancel("payload-1").await;
    assert_eq!(first["cancelled"], true, "{first}");
    assert_eq!(first["job"]["id"], scheduled["id"]);
    assert_eq!(first["job"]["status"], "CANCELLED");
    let fresh = app
        .data(Some(&admin), JOB, json!({ "id": "payload-1" }))
        .await;
    assert_eq!(first["job"], fresh["job"]);

    let again = cancel("payload-1").await;
    assert_eq!(again["cancelled"], false, "{again}");
    assert_eq!(again["job"], first["job"], "still the cancelled job");

    let unknown = cancel("no-such-job").await;
    assert_eq!(unknown, json!({ "cancelled": false, "job": null }));

    let bad_topic = app
        .gql(
            Some(&admin),
            "mutation { cancelPendingJob(topic: \"no topic\", id: \"x\") { cancelled } }",
            json!({}),
        )
        .await;
    assert_eq!(first_code(&bad_topic), "BAD_USER_INPUT", "{bad_topic}");
    let user = app
        .gql(
            Some(&app.user_token(11)),
            CANCEL_PENDING,
            json!({ "id": "payload-1" }),
        )
        .await;
    assert_eq!(first_code(&user), "FORBIDDEN", "{user}");
}

#[tokio::test]
async fn cancel_job_still_answers_whether_it_cancelled() {
    let app = TestApp::spawn().await;
    app.handle_topic("mail");
    let admin = app.admin_token();
    app.data(Some(&admin), SCHEDULE, json!({ "id": "payload-2" }))
        .await;
    let cancel = "mutation { cancelJob(topic: \"mail\", id: \"payload-2\") }";
    assert_eq!(
        app.data(Some(&admin), cancel, json!({})).await["cancelJob"],
        true
    );
    assert_eq!(
        app.data(Some(&admin), cancel, json!({})).await["cancelJob"],
        false
    );
    let job = app
        .data(Some(&admin), JOB, json!({ "id": "payload-2" }))
        .await;
    assert_eq!(job["job"]["status"], "CANCELLED");
}

// Orders.

const VOUCHER: &str = "query($v: ID!) { voucher(id: $v) { id remaining } }";

async fn voucher(app: &TestApp, stock: i64) -> String {
    let item = app.create_item().await;
    let now = app.now();
    let input = json!({
        "itemId": item, "title": "Half price", "stock": stock,
        "beginsAt": (now - chrono::Duration::minutes(1)).to_rfc3339(),
        "endsAt": (now + chrono::Duration::hours(1)).to_rfc3339(),
        "payWithinSeconds": 600,
    });
    let create =
        "mutation($input: CreateVoucherInput!) { createVoucher(input: $input) { id remaining } }";
    let created = app
        .data(Some(&app.admin_token()), create, json!({ "input": input }))
        .await["createVoucher"]
        .clone();
    assert_eq!(created["remaining"], stock);
    created["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn seckill_pay_and_cancel_answer_the_vouchers_remaining_stock_after_the_change() {
    let app = TestApp::spawn().await;
    let voucher = voucher(&app, 5).await;
    let fresh = async || app.data(None, VOUCHER, json!({ "v": voucher })).await["voucher"].clone();
    let seckill = "mutation($v: ID!) { seckillVoucher(voucherId: $v) { id status voucher { id remaining } } }";
    let (first, second) = (app.user_token(12), app.user_token(13));

    let bought = app
        .data(Some(&first), seckill, json!({ "v": voucher }))
        .await["seckillVoucher"]
        .clone();
    assert_eq!(bought["voucher"]["remaining"], 4, "{bought}");
    assert_eq!(bought["voucher"], fresh().await);
    let other = app
        .data(Some(&second), seckill, json!({ "v": voucher }))
        .await["seckillVoucher"]
        .clone();
    assert_eq!(other["voucher"]["remaining"], 3, "{other}");

    let act = |field: &str| {
        format!("mutation($o: ID!) {{ {field}(orderId: $o) {{ id status voucher {{ id remaining }} }} }}")
    };
    let cancelled = app
        .data(
            Some(&first),
            &act("cancelOrder"),
            json!({ "o": bought["id"] }),
        )
        .await["cancelOrder"]
        .clone();
    assert_eq!(cancelled["status"], "CANCELLED");
    assert_eq!(cancelled["voucher"]["remaining"], 4, "the stock came back");
    assert_eq!(cancelled["voucher"], fresh().await);

    let paid = app
        .data(Some(&second), &act("payOrder"), json!({ "o": other["id"] }))
        .await["payOrder"]
        .clone();
    assert_eq!(paid["status"], "PAID");
    assert_eq!(
        paid["voucher"]["remaining"], 4,
        "paying keeps the stock taken"
    );
    assert_eq!(paid["voucher"], fresh().await);
}

// The schema.

#[tokio::test]
async fn the_superseded_fields_are_deprecated_and_name_their_successors() {
    let app = TestApp::spawn().await;
    let query = "{
        likeResult: __type(name: \"LikeResult\") { fields(includeDeprecated: true) { name isDeprecated deprecationReason } }
        signInResult: __type(name: \"SignInResult\") { fields(includeDeprecated: true) { name isDeprecated deprecationReason } }
        mutationRoot: __type(name: \"Mutation\") { fields(includeDeprecated: true) { name isDeprecated deprecationReason } } }";
    let data = app.data(None, query, json!({})).await;
    let reason = |ty: &str, field: &str| -> Option<String> {
        let fields = data[ty]["fields"].as_array().unwrap();
        let found = fields
            .iter()
            .find(|f| f["name"] == field)
            .unwrap_or_else(|| panic!("{ty}.{field}"));
        found["deprecationReason"].as_str().map(str::to_string)
    };
    for (ty, field, successor) in [
        ("likeResult", "remarkId", "remark"),
        ("likeResult", "likeCount", "remark"),
        ("likeResult", "liked", "remark"),
        ("signInResult", "streak", "streak { current }"),
        ("mutationRoot", "makeUpSignIn", "repairDay"),
        ("mutationRoot", "follow", "followUser"),
        ("mutationRoot", "unfollow", "unfollowUser"),
        ("mutationRoot", "cancelJob", "cancelPendingJob"),
    ] {
        let reason = reason(ty, field).unwrap_or_else(|| panic!("{ty}.{field} deprecated"));
        assert!(reason.contains(successor), "{ty}.{field}: {reason}");
    }
    for (ty, field) in [
        ("likeResult", "changed"),
        ("likeResult", "remark"),
        ("signInResult", "calendar"),
        ("mutationRoot", "repairDay"),
        ("mutationRoot", "followUser"),
        ("mutationRoot", "cancelPendingJob"),
    ] {
        assert_eq!(reason(ty, field), None, "{ty}.{field} is current");
    }
}
