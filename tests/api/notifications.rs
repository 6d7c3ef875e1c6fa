//! Notifications: each kind made by the consumers and jobs, grouping, paging, marking read,
//! live delivery, the hot window and recovery.

use chrono::{Duration, NaiveDate};
use serde_json::{json, Value};

use crate::harness::{
    eventually, eventually_within, first_code, global_id, next_data, scan, subscribe, unlimited,
    unlink, TestApp,
};

const LIST: &str = "query($f: Int, $a: String, $u: Boolean) {
    notifications(first: $f, after: $a, unreadOnly: $u) {
      edges { cursor node { id kind text read createdAt actor { id name } remark { id }
              order { id status } board { key } } }
      pageInfo { hasNextPage endCursor } } }";
const COUNT: &str = "{ unreadNotificationCount }";
const MARK: &str = "mutation($id: ID!) { markNotificationsRead(upTo: $id) }";

async fn app() -> TestApp {
    TestApp::spawn_with(unlimited).await
}

async fn list(app: &TestApp, user: i64, first: i64, after: Option<&str>, unread: bool) -> Value {
    app.data(
        Some(&app.user_token(user)),
        LIST,
        json!({ "f": first, "a": after, "u": unread }),
    )
    .await["notifications"]
        .clone()
}

fn nodes(page: &Value) -> Vec<Value> {
    page["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"].clone())
        .collect()
}

async fn unread(app: &TestApp, user: i64) -> i64 {
    app.data(Some(&app.user_token(user)), COUNT, json!({}))
        .await["unreadNotificationCount"]
        .as_i64()
        .unwrap()
}

/// Waits until the user's unread count is `count`.
async fn unread_becomes(app: &TestApp, user: i64, count: i64) {
    eventually(async || unread(app, user).await == count).await;
}

/// Makes the user known (a user is created by their first request).
async fn known(app: &TestApp, user: i64) {
    app.data(Some(&app.user_token(user)), "{ viewer { id } }", json!({}))
        .await;
}

#[tokio::test]
async fn likes_are_grouped_per_remark_per_hour_and_nobody_is_told_of_their_own() {
    let app = app().await;
    let remark = app.create_remark(1).await;
    app.vote(1, &remark, true).await; // one's own like tells nobody
    app.vote(2, &remark, true).await;
    app.vote(3, &remark, true).await;
    app.vote(4, &remark, true).await;
    app.vote(4, &remark, false).await; // an unlike takes nothing back
    eventually(async || {
        let page = list(&app, 1, 10, None, false).await;
        nodes(&page)
            .first()
            .is_some_and(|n| n["text"] == "user4 and 2 others liked your review")
    })
    .await;
    let page = list(&app, 1, 10, None, false).await;
    let first = &nodes(&page)[0];
    assert_eq!(nodes(&page).len(), 1, "one group: {page}");
    assert_eq!(first["kind"], "LIKE_RECEIVED");
    assert_eq!(first["actor"]["id"], global_id("User", 4));
    assert_eq!(first["remark"]["id"], remark);
    assert_eq!(first["read"], false);
    assert_eq!(unread(&app, 1).await, 1);

    // Read, then liked again within the hour: the same group, unread again, on top.
    let marked = app
        .data(Some(&app.user_token(1)), MARK, json!({ "id": first["id"] }))
        .await;
    assert_eq!(marked["markNotificationsRead"], 1);
    assert_eq!(unread(&app, 1).await, 0);
    app.advance_clock(Duration::minutes(30));
    app.vote(5, &remark, true).await;
    unread_becomes(&app, 1, 1).await;
    let page = list(&app, 1, 10, None, false).await;
    assert_eq!(nodes(&page).len(), 1);
    assert_eq!(nodes(&page)[0]["id"], first["id"]);
    assert_eq!(
        nodes(&page)[0]["text"],
        "user5 and 3 others liked your review"
    );

    // Past the hour from the group's first like, a new group begins.
    app.advance_clock(Duration::minutes(31));
    app.vote(6, &remark, true).await;
    unread_becomes(&app, 1, 2).await;
    let page = list(&app, 1, 10, None, false).await;
    let texts: Vec<String> = nodes(&page)
        .iter()
        .map(|n| n["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        texts,
        [
            "user6 liked your review",
            "user5 and 3 others liked your review"
        ]
    );
}

#[tokio::test]
async fn likes_of_many_authors_at_once_are_grouped_per_author_and_remark_each_counted_once() {
    let app = app().await;
    // Six authors of two remarks each, and twenty voters liking all twelve at once: the
    // consumer's batches mix authors, remarks and likes of one group.
    let authors: Vec<i64> = (1..=6).collect();
    let mut remarks = Vec::new();
    for &author in &authors {
        for _ in 0..2 {
            remarks.push((author, app.create_remark(author).await));
        }
    }
    let voters: Vec<i64> = (101..=120).collect();
    let likes: Vec<(i64, &str)> = remarks
        .iter()
        .flat_map(|(_, remark)| voters.iter().map(move |&voter| (voter, remark.as_str())))
        .collect();
    futures::future::join_all(
        likes
            .iter()
            .map(|&(voter, remark)| app.vote(voter, remark, true)),
    )
    .await;
    // 240 likes through three consumers: more than `eventually`'s 10 s on a busy machine.
    let within = std::time::Duration::from_secs(30);
    for &author in &authors {
        eventually_within("two groups, of 20 likes each", within, async || {
            unread(&app, author).await == 2
                && nodes(&list(&app, author, 10, None, false).await)
                    .iter()
                    .all(|n| {
                        n["text"]
                            .as_str()
                            .unwrap()
                            .ends_with("and 19 others liked your review")
                    })
        })
        .await;
        let page = nodes(&list(&app, author, 10, None, false).await);
        let mut told: Vec<&str> = page
            .iter()
            .map(|n| n["remark"]["id"].as_str().unwrap())
            .collect();
        told.sort_unstable();
        let mut theirs: Vec<&str> = remarks
            .iter()
            .filter(|(a, _)| *a == author)
            .map(|(_, remark)| remark.as_str())
            .collect();
        theirs.sort_unstable();
        assert_eq!(told, theirs, "one group per remark of author {author}");
    }
}

#[tokio::test]
async fn a_follow_tells_the_followee_with_the_follower_as_actor() {
    let app = app().await;
    known(&app, 1).await;
    app.follow(2, 1).await;
    unread_becomes(&app, 1, 1).await;
    let page = list(&app, 1, 10, None, false).await;
    let node = &nodes(&page)[0];
    assert_eq!(node["kind"], "NEW_FOLLOWER");
    assert_eq!(node["text"], "user2 started following you");
    assert_eq!(node["actor"]["id"], global_id("User", 2));
    assert_eq!(unread(&app, 2).await, 0);
}

#[tokio::test]
async fn an_unpaid_order_is_reminded_five_minutes_before_it_expires_then_told_it_expired() {
    let app = app().await;
    let voucher = app.create_voucher(5, 600).await;
    let buyer = app.user_token(7);
    let order = app.seckill(&buyer, &voucher).await;
    // A paid order is reminded of nothing.
    let paid = app.seckill(&app.user_token(8), &voucher).await;
    app.data(
        Some(&app.user_token(8)),
        "mutation($o: ID!) { payOrder(orderId: $o) { status } }",
        json!({ "o": paid }),
    )
    .await;
    // The reminders are scheduled by the order consumer.
    eventually(async || {
        app.jobs()
            .find(
                "notifications.order-expiring",
                &crate::harness::local_id(&order).to_string(),
            )
            .await
            .ok()
            .flatten()
            .is_some()
    })
    .await;
    app.advance_clock(Duration::seconds(5 * 60 + 1));
    unread_becomes(&app, 7, 1).await;
    let page = list(&app, 7, 10, None, false).await;
    assert_eq!(nodes(&page)[0]["kind"], "ORDER_EXPIRING");
    assert_eq!(nodes(&page)[0]["order"]["id"], order);
    assert_eq!(
        nodes(&page)[0]["text"],
        "Your order for Half price expires in 5 minutes: pay now to keep it"
    );

    app.advance_clock(Duration::seconds(5 * 60));
    unread_becomes(&app, 7, 2).await;
    let page = list(&app, 7, 10, None, false).await;
    assert_eq!(nodes(&page)[0]["kind"], "ORDER_EXPIRED");
    assert_eq!(nodes(&page)[0]["order"]["status"], "EXPIRED");
    assert_eq!(
        nodes(&page)[0]["text"],
        "Your order for Half price expired unpaid"
    );
    assert_eq!(unread(&app, 8).await, 0);
}

#[tokio::test]
async fn a_board_reward_and_a_streak_milestone_are_told() {
    let app = app().await;
    let admin = app.admin_token();
    app.data(
        Some(&admin),
        "mutation($i: CreateBoardInput!) { createBoard(input: $i) { key } }",
        json!({ "i": { "key": "quiz", "title": "Weekly quiz", "reset": "WEEKLY",
                       "rewards": [ { "fromRank": 1, "toRank": 3, "points": 30 } ] } }),
    )
    .await;
    let service = app.token(999, engage::infra::auth::Role::Service);
    for (user, score) in [(1_i64, 10_i64), (2, 30), (3, 20)] {
        let body = app
            .gql(
                Some(&service),
                "mutation($u: ID, $s: Int!, $k: String!) {
                   submitScore(boardKey: \"quiz\", userId: $u, score: $s, idempotencyKey: $k) { rank } }",
                json!({ "u": user.to_string(), "s": score, "k": uuid::Uuid::new_v4().to_string() }),
            )
            .await;
        assert!(body.get("errors").is_none(), "{body}");
    }
    app.data(
        Some(&admin),
        "mutation { closeBoardPeriod(key: \"quiz\") { period } }",
        json!({}),
    )
    .await;
    unread_becomes(&app, 1, 1).await;
    let page = list(&app, 1, 10, None, false).await;
    assert_eq!(nodes(&page)[0]["kind"], "REWARD_PAID");
    assert_eq!(nodes(&page)[0]["text"], "You won 3rd place on Weekly quiz");
    assert_eq!(nodes(&page)[0]["board"]["key"], "quiz");
    unread_becomes(&app, 2, 1).await;
    assert_eq!(
        nodes(&list(&app, 2, 10, None, false).await)[0]["text"],
        "You won 1st place on Weekly quiz"
    );

    // Seven days in a row: the 7-day milestone pays its bonus, and says so.
    let token = app.user_token(40);
    let first = NaiveDate::from_ymd_opt(2026, 3, 2).unwrap();
    for offset in 0..7 {
        let day = first + Duration::days(offset);
        app.set_clock(day.and_hms_opt(12, 0, 0).unwrap().and_utc());
        app.data(Some(&token), "mutation { signIn { streak } }", json!({}))
            .await;
    }
    unread_becomes(&app, 40, 1).await;
    let page = list(&app, 40, 10, None, false).await;
    assert_eq!(nodes(&page)[0]["kind"], "MILESTONE_REACHED");
    assert!(
        nodes(&page)[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("You reached a 7-day streak and earned "),
        "{page}"
    );
}

#[tokio::test]
async fn a_streak_at_risk_is_told_once_at_eight_in_the_evening_by_two_instances() {
    let app = app().await;
    let sibling = app.spawn_sibling().await;
    let token = app.user_token(50);
    // Signed in yesterday, not today: at 20:00 UTC (the user's zone) the streak is at risk.
    let today = (app.now() + Duration::days(2)).date_naive();
    let yesterday = today - Duration::days(1);
    for instance in [&app, &sibling] {
        instance.set_clock(yesterday.and_hms_opt(12, 0, 0).unwrap().and_utc());
    }
    app.data(Some(&token), "mutation { signIn { streak } }", json!({}))
        .await;
    // The sign-in reaches SQL (the sweep's candidates) before the evening.
    eventually(async || {
        sqlx::query("SELECT user_id FROM sign_ins WHERE user_id = 50")
            .fetch_optional(app.sql())
            .await
            .unwrap()
            .is_some()
    })
    .await;
    // The evening sweep, a repeating job, ran at the clock's noon and waits for its next
    // quarter hour: a run still going when the clock jumps would be followed by the quarter
    // hour after the jump, as a late run is in production.
    let evening = today.and_hms_opt(20, 0, 0).unwrap().and_utc();
    eventually(async || {
        let job = app
            .job(
                "notifications.streak-at-risk",
                "evening",
                "status nextRunAt",
            )
            .await;
        job["status"] == "DELAYED"
            && job["nextRunAt"].as_str().is_some_and(|next| {
                chrono::DateTime::parse_from_rfc3339(next).is_ok_and(|next| next < evening)
            })
    })
    .await;
    for instance in [&app, &sibling] {
        instance.set_clock(today.and_hms_opt(20, 5, 0).unwrap().and_utc());
    }
    unread_becomes(&app, 50, 1).await;
    let page = list(&app, 50, 10, None, false).await;
    assert_eq!(nodes(&page)[0]["kind"], "STREAK_AT_RISK");
    assert_eq!(
        nodes(&page)[0]["text"],
        "Your 1-day streak ends at midnight: sign in today to keep it"
    );
    // Both instances ran their workers meanwhile: still one.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(unread(&app, 50).await, 1);
    assert_eq!(nodes(&list(&sibling, 50, 10, None, false).await).len(), 1);
}

#[tokio::test]
async fn unread_only_pages_through_the_unread_and_marks_count_each_once_under_concurrency() {
    let app = app().await;
    known(&app, 1).await;
    for follower in 2..=31 {
        app.follow(follower, 1).await;
    }
    unread_becomes(&app, 1, 30).await;
    let all = nodes(&list(&app, 1, 30, None, false).await);
    // Mark the 10 oldest read, from 8 requests at once: 10 marked in all.
    let tenth_oldest = all[20]["id"].clone();
    let token = app.user_token(1);
    let marks = futures::future::join_all(
        (0..8).map(|_| app.data(Some(&token), MARK, json!({ "id": tenth_oldest }))),
    )
    .await;
    let marked: i64 = marks
        .iter()
        .map(|m| m["markNotificationsRead"].as_i64().unwrap())
        .sum();
    assert_eq!(marked, 10);
    assert_eq!(unread(&app, 1).await, 20);

    // The unread ones, 8 at a time: 20, newest first, then nothing more.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = list(&app, 1, 8, after.as_deref(), true).await;
        for node in nodes(&page) {
            assert_eq!(node["read"], false);
            seen.push(node["id"].clone());
        }
        if page["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = page["pageInfo"]["endCursor"].as_str().map(str::to_string);
    }
    assert_eq!(
        seen,
        all[..20]
            .iter()
            .map(|n| n["id"].clone())
            .collect::<Vec<_>>()
    );

    // Another user's notification: not found, and not theirs to see.
    let body = app
        .gql(
            Some(&app.user_token(2)),
            MARK,
            json!({ "id": all[0]["id"] }),
        )
        .await;
    assert_eq!(first_code(&body), "NOT_FOUND");
    let node = "query($id: ID!) { node(id: $id) { id ... on Notification { text } } }";
    let theirs = app
        .data(
            Some(&app.user_token(2)),
            node,
            json!({ "id": all[0]["id"] }),
        )
        .await;
    assert_eq!(theirs["node"], Value::Null);
    let mine = app
        .data(
            Some(&app.user_token(1)),
            node,
            json!({ "id": all[0]["id"] }),
        )
        .await;
    assert_eq!(mine["node"]["id"], all[0]["id"]);
    // Signed out: nothing.
    let body = app.gql(None, COUNT, json!({})).await;
    assert_eq!(first_code(&body), "UNAUTHENTICATED");
    let body = app.gql(None, LIST, json!({})).await;
    assert_eq!(first_code(&body), "UNAUTHENTICATED");
}

#[tokio::test]
async fn notifications_arrive_live_with_the_unread_count() {
    let app = app().await;
    let token = app.user_token(1);
    let mut added = subscribe(
        &app,
        Some(&token),
        "subscription { notificationAdded { kind text read actor { id } } }",
    )
    .await;
    let mut counts = subscribe(&app, Some(&token), "subscription { unreadCountChanged }").await;
    assert_eq!(next_data(&mut counts).await["unreadCountChanged"], 0);
    known(&app, 1).await;
    // Let the first subscription take its place before anything is published.
    eventually(async || {
        app.listeners_here(&format!("{}{{notify:1}}:live", app.keys().prefix())) == 2
    })
    .await;
    app.follow(2, 1).await;
    let notice = next_data(&mut added).await;
    assert_eq!(notice["notificationAdded"]["kind"], "NEW_FOLLOWER");
    assert_eq!(notice["notificationAdded"]["read"], false);
    assert_eq!(
        notice["notificationAdded"]["actor"]["id"],
        global_id("User", 2)
    );
    assert_eq!(next_data(&mut counts).await["unreadCountChanged"], 1);

    // Signed out: the subscription ends with the protocol's error, UNAUTHENTICATED.
    let mut anonymous = subscribe(&app, None, "subscription { unreadCountChanged }").await;
    let refused = crate::harness::next_message(&mut anonymous).await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["payload"][0]["extensions"]["code"],
        "UNAUTHENTICATED"
    );
}

#[tokio::test]
async fn the_newest_200_are_hot_older_pages_come_from_sql_and_a_lost_redis_is_rebuilt() {
    let app = app().await;
    known(&app, 1).await;
    for follower in 2..=206 {
        app.follow(follower, 1).await;
    }
    unread_becomes(&app, 1, 205).await;
    let hot = format!("{}{{notify:1}}:hot", app.keys().prefix());
    let mut conn = app.redis_connection().await;
    let held: i64 = redis::cmd("ZCARD")
        .arg(&hot)
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(held, 200);
    drop(conn);

    let read_all = async || {
        let mut ids = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = app
                .data(
                    Some(&app.user_token(1)),
                    "query($a: String) { notifications(first: 100, after: $a) {
                       edges { node { id } } pageInfo { hasNextPage endCursor } } }",
                    json!({ "a": after }),
                )
                .await["notifications"]
                .clone();
            ids.extend(nodes(&page).iter().map(|n| n["id"].clone()));
            if page["pageInfo"]["hasNextPage"] != true {
                break;
            }
            after = page["pageInfo"]["endCursor"].as_str().map(str::to_string);
        }
        ids
    };
    let ids = read_all().await;
    assert_eq!(ids.len(), 205);
    let unique: std::collections::HashSet<String> = ids
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    assert_eq!(unique.len(), 205);

    // Redis loses the user: reads come from SQL, verify names it, rebuild restores it.
    let keys = scan(&app, &format!("{}{{notify:1}}:*", app.keys().prefix())).await;
    assert!(!keys.is_empty());
    unlink(&app, &keys).await;
    assert_eq!(unread(&app, 1).await, 205);
    assert_eq!(read_all().await, ids);
    let reports = app.verify_all().await.unwrap();
    let report = reports
        .iter()
        .find(|r| r.feature == "notifications")
        .unwrap();
    assert!(!report.is_clean(), "{report:?}");
    app.rebuild_from_sql().await.unwrap();
    let reports = app.verify_all().await.unwrap();
    let report = reports
        .iter()
        .find(|r| r.feature == "notifications")
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    let mut conn = app.redis_connection().await;
    let held: i64 = redis::cmd("ZCARD")
        .arg(&hot)
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(held, 200);
    drop(conn);
    assert_eq!(read_all().await, ids);
}

#[tokio::test]
async fn notifications_are_kept_ninety_days() {
    let app = app().await;
    known(&app, 1).await;
    app.follow(2, 1).await;
    unread_becomes(&app, 1, 1).await;
    // The evening job prunes: the one due once the clock passes its slot.
    app.advance_clock(Duration::days(91));
    unread_becomes(&app, 1, 0).await;
    assert!(nodes(&list(&app, 1, 10, None, false).await).is_empty());
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM notifications")
        .fetch_one(app.sql())
        .await
        .unwrap();
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn the_inbox_is_the_viewers_own_and_bounded_on_every_transport() {
    use crate::via::{self, code, Via};
    let app = app().await;
    let token = app.user_token(1);
    for via in via::ALL {
        for query in [
            "{ unreadNotificationCount }",
            "{ notifications { edges { node { id } } } }",
        ] {
            let answer = via::send(&app, via, None, query, json!({})).await;
            assert_eq!(
                code(&answer),
                "UNAUTHENTICATED",
                "{via:?} {query}: {answer}"
            );
        }
        for first in [0, 101] {
            let query = format!("{{ notifications(first: {first}) {{ edges {{ cursor }} }} }}");
            let answer = via::send(&app, via, Some(&token), &query, json!({})).await;
            assert_eq!(code(&answer), "BAD_USER_INPUT", "{via:?} {query}: {answer}");
        }
        let answer = via::send(
            &app,
            via,
            Some(&token),
            "{ unreadNotificationCount }",
            json!({}),
        )
        .await;
        assert_eq!(
            answer["data"]["unreadNotificationCount"], 0,
            "{via:?}: {answer}"
        );
    }
    for via in [Via::TransportWs, Via::LegacyWs] {
        for query in [
            "subscription { notificationAdded { id } }",
            "subscription { unreadCountChanged }",
        ] {
            let answer = via::send(&app, via, None, query, json!({})).await;
            assert_eq!(
                code(&answer),
                "UNAUTHENTICATED",
                "{via:?} {query}: {answer}"
            );
        }
    }
    // A mutation is refused over GET before it runs.
    let answer = via::send(
        &app,
        Via::Get,
        Some(&token),
        &format!(
            r#"mutation {{ markNotificationsRead(upTo: "{}") }}"#,
            global_id("Notification", 1)
        ),
        json!({}),
    )
    .await;
    assert_ne!(code(&answer), "", "{answer}");
    assert!(answer["data"].is_null(), "{answer}");
}
