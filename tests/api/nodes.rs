//! Global object identification: every object's `id` is global and opaque, `node` and
//! `nodes` fetch any object by it with the permissions of the object's own query, and
//! arguments take their type's global id (or, for now, the bare local id).

use serde_json::{json, Value};

use crate::harness::{
    first_code, global_id, local_id, next_data, next_message, subscribe, TestApp,
};

const NODE: &str = "query($id: ID!) { node(id: $id) { __typename id } }";
const NODES: &str = "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id } }";

/// A remark on a new item by `author`: (item id, remark id).
async fn remark(app: &TestApp, author: i64) -> (String, String) {
    let item = app.create_item().await;
    let input = json!({ "input": { "itemId": item, "score": 4, "content": "fine tea" } });
    let data = app
        .data(
            Some(&app.user_token(author)),
            "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id itemId } }",
            input,
        )
        .await;
    assert_eq!(data["createRemark"]["itemId"], json!(item));
    (
        item,
        data["createRemark"]["id"].as_str().unwrap().to_string(),
    )
}

/// A voucher on sale now and an order of it by `buyer`: (voucher id, order id).
async fn order(app: &TestApp, buyer: i64) -> (String, String) {
    let voucher = app.create_voucher(5, 600).await;
    let order = app.seckill(&app.user_token(buyer), &voucher).await;
    (voucher, order)
}

/// Schedules job `id` of `topic`, due in an hour: its `id` and `jobId`.
async fn job(app: &TestApp, topic: &str, id: &str) -> Value {
    let input = json!({ "id": id, "topic": topic, "body": "{}", "delaySeconds": 3600 });
    app.handle_topic(topic);
    app.data(
        Some(&app.admin_token()),
        "mutation($input: ScheduleJobInput!) { scheduleJob(input: $input) { id jobId } }",
        json!({ "input": input }),
    )
    .await["scheduleJob"]
        .clone()
}

/// The signed-in user's id (the user exists once seen).
async fn user(app: &TestApp, user: i64) -> String {
    app.data(Some(&app.user_token(user)), "{ viewer { id } }", json!({}))
        .await["viewer"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn node(app: &TestApp, token: Option<&str>, id: &str) -> Value {
    app.data(token, NODE, json!({ "id": id })).await["node"].clone()
}

#[tokio::test]
async fn node_refetches_every_kind_of_object_by_the_id_it_answered() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let buyer = app.user_token(7);
    let (item, remark) = remark(&app, 5).await;
    let author = user(&app, 5).await;
    let (voucher, order) = order(&app, 7).await;
    let job = job(&app, "mail", "welcome-1").await;
    let season = app.data(None, "{ seasons { id } }", json!({})).await["seasons"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (typename, id, token) in [
        ("Item", item.as_str(), None),
        ("Remark", remark.as_str(), None),
        ("User", author.as_str(), None),
        ("Voucher", voucher.as_str(), None),
        ("Season", season.as_str(), None),
        ("Order", order.as_str(), Some(buyer.as_str())),
        ("Job", job["id"].as_str().unwrap(), Some(admin.as_str())),
    ] {
        assert_eq!(
            node(&app, token, id).await,
            json!({ "__typename": typename, "id": id }),
            "{typename}"
        );
    }
    let all = app
        .data(
            Some(&admin),
            NODES,
            json!({ "ids": [&season, &remark, "garbage", &item, &author, &voucher] }),
        )
        .await;
    let typenames: Vec<&Value> = all["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["__typename"])
        .collect();
    assert_eq!(
        typenames,
        [
            &json!("Season"),
            &json!("Remark"),
            &Value::Null,
            &json!("Item"),
            &json!("User"),
            &json!("Voucher")
        ]
    );
    assert_eq!(all["nodes"][1]["id"], json!(remark));
}

#[tokio::test]
async fn ids_are_opaque_and_unique_across_types() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    // A user whose number is the item's.
    let user = user(&app, local_id(&item)).await;
    assert_ne!(user, item);
    assert_eq!(node(&app, None, &item).await["__typename"], "Item");
    assert_eq!(node(&app, None, &user).await["__typename"], "User");
    assert_eq!(user, global_id("User", local_id(&item)));
}

#[tokio::test]
async fn an_order_is_a_node_for_its_buyer_alone() {
    let app = TestApp::spawn().await;
    let (_, order) = order(&app, 21).await;
    let ours = node(&app, Some(&app.user_token(21)), &order).await;
    assert_eq!(ours, json!({ "__typename": "Order", "id": order }));
    assert_eq!(
        node(&app, Some(&app.user_token(22)), &order).await,
        Value::Null
    );
    assert_eq!(node(&app, None, &order).await, Value::Null);
    let theirs = app
        .data(
            Some(&app.user_token(22)),
            NODES,
            json!({ "ids": [&order, &order] }),
        )
        .await;
    assert_eq!(theirs["nodes"], json!([null, null]));
}

#[tokio::test]
async fn a_job_is_a_node_only_with_the_role_job_needs() {
    let app = TestApp::spawn().await;
    let job = job(&app, "mail", "welcome-1").await;
    assert_eq!(job["jobId"], "welcome-1");
    let id = job["id"].as_str().unwrap();
    let user = app.user_token(3);

    let refused = app.gql(Some(&user), NODE, json!({ "id": id })).await;
    assert_eq!(first_code(&refused), "FORBIDDEN");
    assert_eq!(refused["data"]["node"], Value::Null);
    let direct = app
        .gql(
            Some(&user),
            "{ job(topic: \"mail\", id: \"welcome-1\") { id } }",
            json!({}),
        )
        .await;
    assert_eq!(
        refused["errors"][0]["message"],
        direct["errors"][0]["message"]
    );
    assert_eq!(
        first_code(&app.gql(None, NODE, json!({ "id": id })).await),
        "UNAUTHENTICATED"
    );

    // In `nodes`, the job alone is null, its error at its index.
    let item = app.create_item().await;
    let mixed = app
        .gql(Some(&user), NODES, json!({ "ids": [&item, id] }))
        .await;
    assert_eq!(mixed["data"]["nodes"][0]["id"], json!(item));
    assert_eq!(mixed["data"]["nodes"][1], Value::Null);
    assert_eq!(mixed["errors"][0]["path"], json!(["nodes", 1]));
    assert_eq!(first_code(&mixed), "FORBIDDEN");

    let admin = app.admin_token();
    assert_eq!(
        node(&app, Some(&admin), id).await,
        json!({ "__typename": "Job", "id": id })
    );
    let fetched = app
        .data(
            Some(&admin),
            "query($id: ID!) { node(id: $id) { ... on Job { topic jobId status } } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(
        fetched["node"],
        json!({ "topic": "mail", "jobId": "welcome-1", "status": "DELAYED" })
    );
}

#[tokio::test]
async fn jobs_of_the_same_job_id_in_two_topics_have_two_ids() {
    let app = TestApp::spawn().await;
    let mail = job(&app, "mail", "same").await;
    let sms = job(&app, "sms", "same").await;
    assert_eq!(mail["jobId"], sms["jobId"]);
    assert_ne!(mail["id"], sms["id"]);
    let admin = app.admin_token();
    let query = "query($ids: [ID!]!) { nodes(ids: $ids) { ... on Job { topic } } }";
    let both = app
        .data(
            Some(&admin),
            query,
            json!({ "ids": [mail["id"], sms["id"]] }),
        )
        .await;
    assert_eq!(
        both["nodes"],
        json!([{ "topic": "mail" }, { "topic": "sms" }])
    );
    // The job fields take the job id with its topic, as before.
    let read = app
        .data(
            Some(&admin),
            "{ job(topic: \"sms\", id: \"same\") { id } }",
            json!({}),
        )
        .await;
    assert_eq!(read["job"]["id"], sms["id"]);
}

#[tokio::test]
async fn unknown_and_malformed_ids_are_null() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    for id in [
        global_id("Item", local_id(&item) + 1000),
        global_id("Remark", 1),
        global_id("Season", 209912),
        global_id("Job", "no-slash"),
        global_id("Job", "mail/none"),
        global_id("Thing", 1),
        local_id(&item).to_string(),
        "garbage".to_string(),
    ] {
        assert_eq!(
            node(&app, Some(&app.admin_token()), &id).await,
            Value::Null,
            "{id}"
        );
    }
}

#[tokio::test]
async fn arguments_take_global_ids_and_for_now_bare_local_ones() {
    let app = TestApp::spawn().await;
    let (item, remark) = remark(&app, 5).await;
    let like = "mutation($id: ID!) { likeRemark(remarkId: $id) { remarkId likeCount } }";
    let liked = app
        .data(Some(&app.user_token(6)), like, json!({ "id": remark }))
        .await;
    assert_eq!(
        liked["likeRemark"],
        json!({ "remarkId": remark, "likeCount": 1 })
    );
    // The bare number, as a string and as a number: deprecated, still taken.
    let bare = local_id(&remark);
    for id in [json!(bare.to_string()), json!(bare)] {
        let again = app
            .data(Some(&app.user_token(7)), like, json!({ "id": id }))
            .await;
        assert_eq!(again["likeRemark"]["remarkId"], json!(remark));
    }
    let read = app
        .data(
            None,
            &format!("{{ item(id: \"{}\") {{ id }} }}", local_id(&item)),
            json!({}),
        )
        .await;
    assert_eq!(read["item"]["id"], json!(item));
    let season = app.data(None, "{ seasons { id } }", json!({})).await["seasons"][0]["id"].clone();
    let current = app.current_month().id();
    for given in [season.clone(), json!(current.to_string())] {
        let board = app
            .data(
                None,
                "query($s: ID) { leaderboard(seasonId: $s) { season { id } } }",
                json!({ "s": given }),
            )
            .await;
        assert_eq!(board["leaderboard"]["season"]["id"], season);
    }
    // A user's global id where a user is expected, and a bare one.
    let award = "mutation($u: ID!, $k: String!) { awardPoints(userId: $u, type: LEARNING, points: 1, idempotencyKey: $k) { awarded } }";
    for (user, key) in [(global_id("User", 8), "k1"), ("8".to_string(), "k2")] {
        let awarded = app
            .data(
                Some(&app.admin_token()),
                award,
                json!({ "u": user, "k": key }),
            )
            .await;
        assert_eq!(awarded["awardPoints"]["awarded"], 1);
    }
}

#[tokio::test]
async fn a_global_id_of_another_type_is_refused_as_bad_input() {
    let app = TestApp::spawn().await;
    let (item, _) = remark(&app, 5).await;
    let like = "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }";
    let body = app
        .gql(Some(&app.user_token(6)), like, json!({ "id": item }))
        .await;
    assert_eq!(first_code(&body), "BAD_USER_INPUT");
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("expected a Remark id, got an Item id"),
        "{message}"
    );
    let body = app
        .gql(Some(&app.user_token(6)), like, json!({ "id": "garbage" }))
        .await;
    assert_eq!(first_code(&body), "BAD_USER_INPUT");
    assert!(
        body["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("expected a Remark id"),
        "{body}"
    );
    let body = app
        .gql(
            None,
            "query($s: ID) { leaderboard(seasonId: $s) { total } }",
            json!({ "s": item }),
        )
        .await;
    assert_eq!(first_code(&body), "BAD_USER_INPUT");
}

#[tokio::test]
async fn subscriptions_take_global_and_bare_ids_and_refuse_another_types_id() {
    let app = TestApp::spawn().await;
    let (item, remark) = remark(&app, 5).await;
    let watch = |id: &str| {
        format!(
            "subscription {{ likeCountChanged(remarkIds: [\"{id}\"]) {{ remarkId likeCount }} }}"
        )
    };
    let mut socket = subscribe(&app, None, &watch(&remark)).await;
    assert_eq!(
        next_data(&mut socket).await["likeCountChanged"],
        json!({ "remarkId": remark, "likeCount": 0 })
    );
    let mut socket = subscribe(&app, None, &watch(&item)).await;
    let refused = next_message(&mut socket).await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(
        refused["payload"][0]["extensions"]["code"],
        "BAD_USER_INPUT"
    );

    // A season by its bare `YYYYMM`, answered with its global id.
    let current = app.current_month().id();
    let board = format!(
        "subscription {{ leaderboardChanged(seasonId: \"{current}\") {{ season {{ id }} }} }}"
    );
    let mut socket = subscribe(&app, None, &board).await;
    assert_eq!(
        next_data(&mut socket).await["leaderboardChanged"]["season"]["id"],
        global_id("Season", current)
    );
}

#[tokio::test]
async fn nodes_takes_at_most_a_hundred_ids_in_their_order() {
    let app = TestApp::spawn().await;
    let item = app.create_item().await;
    let ids: Vec<&str> = std::iter::repeat_n(item.as_str(), 100).collect();
    let hundred = app.data(None, NODES, json!({ "ids": ids })).await;
    assert_eq!(hundred["nodes"].as_array().unwrap().len(), 100);
    let ids: Vec<&str> = std::iter::repeat_n(item.as_str(), 101).collect();
    let body = app.gql(None, NODES, json!({ "ids": ids })).await;
    assert_eq!(first_code(&body), "BAD_USER_INPUT", "{body}");
}

#[tokio::test]
async fn a_remark_refetched_by_node_reads_its_live_fields() {
    let app = TestApp::spawn().await;
    let (_, remark) = remark(&app, 5).await;
    app.data(
        Some(&app.user_token(6)),
        "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }",
        json!({ "id": remark }),
    )
    .await;
    let refetch = "query($id: ID!) { node(id: $id) { id ... on Remark { likeCount likedByMe author { id } } } }";
    let data = app
        .data(Some(&app.user_token(6)), refetch, json!({ "id": remark }))
        .await;
    assert_eq!(
        data["node"],
        json!({ "id": remark, "likeCount": 1, "likedByMe": true, "author": { "id": global_id("User", 5) } })
    );
}
