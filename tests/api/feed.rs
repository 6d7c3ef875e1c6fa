//! The follow feed (push and pull) and nearby items.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{first_code, local_id, streams_settled, unlimited, TestApp};

const FEED: &str = "query($after: String, $first: Int) { feed(first: $first, after: $after) {
    edges { cursor node { id author { id } } } pageInfo { hasNextPage endCursor } } }";

async fn app(push_limit: u64, inbox: u64) -> TestApp {
    TestApp::spawn_with(move |config| {
        unlimited(config);
        config.feed.feed_push_limit = push_limit;
        config.feed.feed_inbox_size = inbox;
    })
    .await
}

/// Makes sure users exist (first sight) so they can be followed.
async fn meet(app: &TestApp, users: &[i64]) {
    for user in users {
        app.data(Some(&app.user_token(*user)), "{ viewer { id } }", json!({}))
            .await;
    }
}

async fn follow(app: &TestApp, follower: i64, followee: i64) -> Value {
    app.gql(
        Some(&app.user_token(follower)),
        "mutation($u: ID!) { follow(userId: $u) }",
        json!({ "u": followee.to_string() }),
    )
    .await
}

/// Each author reviews a new item; returns the remark ids in creation order.
async fn remarks_by(app: &TestApp, authors: &[i64]) -> Vec<String> {
    let mut ids = Vec::new();
    for author in authors {
        let item = app.create_item().await;
        let remark = app
            .data(
                Some(&app.user_token(*author)),
                "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 4, content: \"nice\" }) { id } }",
                json!({ "i": item }),
            )
            .await;
        ids.push(remark["createRemark"]["id"].as_str().unwrap().to_string());
    }
    streams_settled(app, &[app.keys().remark_stream()], "fanout").await;
    ids
}

async fn read_all(app: &TestApp, reader: i64, page: i64) -> Vec<String> {
    let token = app.user_token(reader);
    let (mut ids, mut after) = (Vec::new(), Value::Null);
    loop {
        let body = app
            .data(Some(&token), FEED, json!({ "after": after, "first": page }))
            .await;
        for edge in body["feed"]["edges"].as_array().unwrap() {
            ids.push(edge["node"]["id"].as_str().unwrap().to_string());
        }
        if body["feed"]["pageInfo"]["hasNextPage"] != true {
            return ids;
        }
        after = body["feed"]["pageInfo"]["endCursor"].clone();
    }
}

#[tokio::test]
async fn the_feed_shows_followed_authors_newest_first_and_forgets_unfollowed_ones() {
    let app = app(1000, 100).await;
    meet(&app, &[1, 2, 3, 4]).await;
    assert_eq!(follow(&app, 1, 2).await["data"]["follow"], true);
    assert_eq!(
        follow(&app, 1, 2).await["data"]["follow"],
        false,
        "idempotent"
    );
    follow(&app, 1, 3).await;
    let ids = remarks_by(&app, &[2, 3, 4, 2]).await;
    assert_eq!(
        read_all(&app, 1, 10).await,
        [ids[3].as_str(), ids[1].as_str(), ids[0].as_str()],
        "newest first, not the unfollowed author 4"
    );

    let counts = app
        .data(
            Some(&app.user_token(1)),
            "{ viewer { followerCount followingCount } }",
            json!({}),
        )
        .await;
    assert_eq!(
        counts["viewer"],
        json!({ "followerCount": 0, "followingCount": 2 })
    );

    let unfollow = "mutation($u: ID!) { unfollow(userId: $u) }";
    assert_eq!(
        app.data(Some(&app.user_token(1)), unfollow, json!({ "u": "2" }))
            .await["unfollow"],
        true
    );
    assert_eq!(read_all(&app, 1, 10).await, [ids[1].as_str()]);

    assert_eq!(first_code(&follow(&app, 1, 1).await), "BAD_USER_INPUT");
    assert_eq!(first_code(&follow(&app, 1, 999_999).await), "NOT_FOUND");
    assert_eq!(
        first_code(&app.gql(None, FEED, json!({})).await),
        "UNAUTHENTICATED"
    );
}

#[tokio::test]
async fn paging_has_no_duplicates_or_gaps_while_new_remarks_arrive() {
    let app = app(1000, 100).await;
    let authors: Vec<i64> = (10..16).collect();
    meet(&app, &authors).await;
    meet(&app, &[1]).await;
    for author in &authors {
        follow(&app, 1, *author).await;
    }
    let first_batch = remarks_by(&app, &[10, 11, 12, 13, 14, 15, 10, 11]).await;
    let token = app.user_token(1);
    let page = app.data(Some(&token), FEED, json!({ "first": 3 })).await;
    let mut seen: Vec<String> = page["feed"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["id"].as_str().unwrap().to_string())
        .collect();
    let mut after = page["feed"]["pageInfo"]["endCursor"].clone();
    // New remarks arrive between pages: they are newer than the cursor, so later pages
    // neither repeat nor skip anything.
    remarks_by(&app, &[12, 13]).await;
    loop {
        let page = app
            .data(Some(&token), FEED, json!({ "first": 3, "after": after }))
            .await;
        for edge in page["feed"]["edges"].as_array().unwrap() {
            seen.push(edge["node"]["id"].as_str().unwrap().to_string());
        }
        if page["feed"]["pageInfo"]["hasNextPage"] != true {
            break;
        }
        after = page["feed"]["pageInfo"]["endCursor"].clone();
    }
    let mut expected = first_batch.clone();
    expected.reverse();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn equal_timestamps_keep_a_stable_order_across_pages() {
    let app = app(1000, 100).await;
    meet(&app, &[1, 2]).await;
    follow(&app, 1, 2).await;
    // Five entries in the same millisecond, as a burst would give.
    let mut conn = app.redis_connection().await;
    let inbox = app.keys().feed_inbox(1);
    let ids = remarks_by(&app, &[2, 2, 2, 2, 2]).await;
    let () = redis::cmd("DEL")
        .arg(&inbox)
        .query_async(&mut *conn)
        .await
        .unwrap();
    for id in &ids {
        let member = format!("{:020}:2", local_id(id));
        let _: i64 = redis::cmd("ZADD")
            .arg(&inbox)
            .arg(1_700_000_000_000_i64)
            .arg(member)
            .query_async(&mut *conn)
            .await
            .unwrap();
    }
    drop(conn);
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(read_all(&app, 1, 2).await, expected);
}

#[tokio::test]
async fn inboxes_are_trimmed_to_their_size() {
    let app = app(1000, 3).await;
    meet(&app, &[1, 2]).await;
    follow(&app, 1, 2).await;
    let ids = remarks_by(&app, &[2, 2, 2, 2, 2]).await;
    let mut conn = app.redis_connection().await;
    let size: i64 = redis::cmd("ZCARD")
        .arg(app.keys().feed_inbox(1))
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(size, 3);
    drop(conn);
    assert_eq!(
        read_all(&app, 1, 10).await,
        [ids[4].as_str(), ids[3].as_str(), ids[2].as_str()]
    );
}

#[tokio::test]
async fn a_big_authors_remarks_are_pulled_and_merged_at_read_time() {
    // Authors with more than two followers are not pushed.
    let app = app(2, 100).await;
    meet(&app, &[1, 2, 3, 4, 5, 6]).await;
    for follower in [1, 3, 4] {
        follow(&app, follower, 2).await; // 2 becomes big: three followers
    }
    follow(&app, 1, 5).await;
    let ids = remarks_by(&app, &[2, 5, 2, 5]).await;
    let mut conn = app.redis_connection().await;
    let inbox: Vec<String> = redis::cmd("ZRANGE")
        .arg(app.keys().feed_inbox(1))
        .arg(0)
        .arg(-1)
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(inbox.len(), 2, "only the small author was pushed");
    drop(conn);
    assert_eq!(
        read_all(&app, 1, 1).await,
        [
            ids[3].as_str(),
            ids[2].as_str(),
            ids[1].as_str(),
            ids[0].as_str()
        ],
        "merged, newest first"
    );
    assert_eq!(
        read_all(&app, 3, 10).await,
        [ids[2].as_str(), ids[0].as_str()]
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
}

const NEARBY: &str = "query($lat: Float!, $lng: Float!, $r: Float!, $first: Int, $after: String) {
    nearbyItems(lat: $lat, lng: $lng, radiusKm: $r, first: $first, after: $after) {
      edges { cursor node { distanceKm item { id name } } } pageInfo { hasNextPage endCursor } } }";

#[tokio::test]
async fn nearby_items_come_nearest_first_with_known_distances() {
    let app = app(1000, 100).await;
    let admin = app.admin_token();
    let create = "mutation($n: String!, $lat: Float, $lng: Float) { createItem(input: { name: $n, lat: $lat, lng: $lng }) { id } }";
    // Around the Bund in Shanghai; distances from People's Square (31.2304, 121.4737).
    for (name, lat, lng) in [
        ("Bund", 31.2400, 121.4900),
        ("Jing'an Temple", 31.2231, 121.4456),
        ("Xujiahui", 31.1955, 121.4370),
        ("Hangzhou", 30.2741, 120.1551),
    ] {
        app.data(
            Some(&admin),
            create,
            json!({ "n": name, "lat": lat, "lng": lng }),
        )
        .await;
    }
    app.data(
        Some(&admin),
        create,
        json!({ "n": "Nowhere in particular" }),
    )
    .await;

    let page = app
        .data(
            None,
            NEARBY,
            json!({ "lat": 31.2304, "lng": 121.4737, "r": 10.0, "first": 2 }),
        )
        .await;
    let edges = page["nearbyItems"]["edges"].as_array().unwrap();
    let names: Vec<&str> = edges
        .iter()
        .map(|e| e["node"]["item"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Bund", "Jing'an Temple"]);
    let bund = edges[0]["node"]["distanceKm"].as_f64().unwrap();
    assert!(
        (bund - 1.88).abs() < 0.05,
        "Bund is about 1.88 km away, got {bund}"
    );
    assert_eq!(page["nearbyItems"]["pageInfo"]["hasNextPage"], true);

    let rest = app
        .data(None, NEARBY, json!({ "lat": 31.2304, "lng": 121.4737, "r": 10.0, "first": 2, "after": page["nearbyItems"]["pageInfo"]["endCursor"] }))
        .await;
    let names: Vec<&str> = rest["nearbyItems"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["node"]["item"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Xujiahui"], "Hangzhou is beyond 10 km");
    assert_eq!(rest["nearbyItems"]["pageInfo"]["hasNextPage"], false);

    for (lat, lng, r) in [
        (91.0, 0.0, 1.0),
        (0.0, 181.0, 1.0),
        (0.0, 0.0, 0.0),
        (0.0, 0.0, -1.0),
        (0.0, 0.0, 5000.0),
    ] {
        let body = app
            .gql(None, NEARBY, json!({ "lat": lat, "lng": lng, "r": r }))
            .await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{lat} {lng} {r}");
    }
}

#[tokio::test]
async fn a_malformed_or_out_of_reach_nearby_cursor_is_bad_user_input() {
    let app = app(1000, 100).await;
    let huge = format!("c{}", "9".repeat(40_000));
    for after in [
        "",
        "c",
        "c-1",
        "c+1",
        "c1.5",
        "cursor",
        "Y3Vyc29yOjIw",
        "c1001",
        "c9223372036854775807",
        "c99999999999999999999",
        huge.as_str(),
    ] {
        let body = app
            .gql(
                None,
                NEARBY,
                json!({ "lat": 31.2304, "lng": 121.4737, "r": 10.0, "first": 20, "after": after }),
            )
            .await;
        assert_eq!(
            first_code(&body),
            "BAD_USER_INPUT",
            "{}",
            &after[..after.len().min(40)]
        );
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(message.len() < 200, "the cursor is not echoed whole");
    }
}

#[tokio::test]
async fn a_nearby_search_pages_through_its_1000_nearest_items_and_no_further() {
    let app = app(1000, 100).await;
    // 1,100 places around one point, put straight into the GEO set.
    let mut conn = crate::harness::redis(&app).await;
    let mut add = redis::cmd("GEOADD");
    add.arg(app.keys().item_locations());
    for i in 1..=1100 {
        add.arg(121.4737 + f64::from(i) * 1e-5).arg(31.2304).arg(i);
    }
    let added: i64 = add.query_async(&mut conn).await.unwrap();
    assert_eq!(added, 1100);

    let page = |after: &str| {
        app.data(
            None,
            NEARBY,
            json!({ "lat": 31.2304, "lng": 121.4737, "r": 100.0, "first": 20, "after": after }),
        )
    };
    let inside = page("c500").await;
    assert_eq!(inside["nearbyItems"]["pageInfo"]["endCursor"], "c520");
    assert_eq!(inside["nearbyItems"]["pageInfo"]["hasNextPage"], true);
    // The last page of the window is cut at its end and says nothing follows.
    let last = page("c990").await;
    assert_eq!(last["nearbyItems"]["pageInfo"]["endCursor"], "c1000");
    assert_eq!(last["nearbyItems"]["pageInfo"]["hasNextPage"], false);
    let end = page("c1000").await;
    assert_eq!(end["nearbyItems"]["pageInfo"]["endCursor"], Value::Null);
    assert_eq!(end["nearbyItems"]["pageInfo"]["hasNextPage"], false);
}

#[tokio::test]
async fn a_hundred_remarks_of_one_millisecond_all_come_back_page_by_page() {
    let app = app(1000, 200).await;
    meet(&app, &[1, 2]).await;
    follow(&app, 1, 2).await;
    let written = remarks_by(&app, &[2; 100]).await;
    // As if all hundred were written in the same millisecond.
    let mut conn = app.redis_connection().await;
    let inbox = app.keys().feed_inbox(1);
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&inbox)
        .arg(0)
        .arg(-1)
        .query_async(&mut *conn)
        .await
        .unwrap();
    assert_eq!(members.len(), 100);
    let mut same = redis::cmd("ZADD");
    same.arg(&inbox);
    for member in &members {
        same.arg(1_700_000_000_000_i64).arg(member);
    }
    let _: i64 = same.query_async(&mut *conn).await.unwrap();
    drop(conn);

    for page in [1, 7, 20] {
        let read = read_all(&app, 1, page).await;
        assert_eq!(read.len(), 100, "pages of {page}");
        let mut sorted = read.clone();
        sorted.sort();
        sorted.dedup();
        let mut expected = written.clone();
        expected.sort();
        assert_eq!(sorted, expected, "pages of {page}");
    }
}

#[tokio::test]
async fn an_author_back_under_the_push_limit_keeps_what_they_posted_while_above_it() {
    let app = app(2, 100).await;
    meet(&app, &[1, 2, 3, 4]).await;
    for follower in [1, 3, 4] {
        follow(&app, follower, 2).await;
    }
    let while_big = remarks_by(&app, &[2]).await;
    app.data(
        Some(&app.user_token(4)),
        "mutation($u: ID!) { unfollow(userId: $u) }",
        json!({ "u": "2" }),
    )
    .await;
    let while_small = remarks_by(&app, &[2]).await;
    let read = read_all(&app, 1, 10).await;
    assert_eq!(read, [while_small[0].clone(), while_big[0].clone()]);
}

#[tokio::test]
async fn following_someone_brings_their_recent_remarks_into_the_feed() {
    let app = app(1000, 100).await;
    meet(&app, &[1, 2]).await;
    let mut written = remarks_by(&app, &[2, 2, 2]).await;
    assert!(read_all(&app, 1, 10).await.is_empty());
    follow(&app, 1, 2).await;
    written.reverse();
    assert_eq!(read_all(&app, 1, 10).await, written, "newest first");
}
