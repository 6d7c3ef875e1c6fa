//! Paging as the Relay cursor connections specification has it: `first`/`after` forward,
//! `last`/`before` backward on the keyset lists, `pageInfo` on every page, and arguments
//! refused with a code.

use engage::infra::auth::Role;
use serde_json::{json, Value};

use crate::harness::{self, eventually, first_code, local_id, TestApp};

const PAGE_INFO: &str = "pageInfo { hasNextPage hasPreviousPage startCursor endCursor }";

async fn unlimited() -> TestApp {
    TestApp::spawn_with(harness::unlimited).await
}

/// The document reading one page of `field` (with `head` its other arguments' declarations
/// and `args` their uses), every paging argument a variable.
fn document(head: &str, field: &str, args: &str) -> String {
    format!(
        "query({head} $first: Int, $after: String, $last: Int, $before: String) {{ \
         {field}({args} first: $first, after: $after, last: $last, before: $before) {{ \
         edges {{ cursor }} {PAGE_INFO} }} }}"
    )
}

/// One list, read by one user.
struct List<'a> {
    app: &'a TestApp,
    token: String,
    field: &'static str,
    document: String,
    variables: Value,
}

impl List<'_> {
    /// The whole answer to one page's request.
    async fn answer(&self, paging: Value) -> Value {
        let mut variables = self.variables.clone();
        variables
            .as_object_mut()
            .unwrap()
            .extend(paging.as_object().unwrap().clone());
        self.app
            .gql(Some(&self.token), &self.document, variables)
            .await
    }

    /// One page: its cursors and its `pageInfo`.
    async fn page(&self, paging: Value) -> (Vec<String>, Value) {
        let answer = self.answer(paging).await;
        assert!(answer.get("errors").is_none(), "{answer}");
        let connection = &answer["data"][self.field];
        let cursors = connection["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|edge| edge["cursor"].as_str().unwrap().to_string())
            .collect();
        (cursors, connection["pageInfo"].clone())
    }

    /// Reads the list forward by `size`, then backward by `size`: both give the same
    /// `expected` rows in the same order, and each page's `pageInfo` tells where it lies.
    async fn pages_both_ways(&self, size: usize, expected: usize) {
        let mut forward = Vec::new();
        let mut after = Value::Null;
        let mut pages = 0;
        loop {
            let (cursors, info) = self.page(json!({ "first": size, "after": after })).await;
            pages += 1;
            assert_eq!(info["hasPreviousPage"], pages > 1, "page {pages}: {info}");
            assert_eq!(info["startCursor"], json!(cursors.first()), "{info}");
            assert_eq!(info["endCursor"], json!(cursors.last()), "{info}");
            forward.extend(cursors);
            assert_eq!(
                info["hasNextPage"],
                forward.len() < expected,
                "page {pages}: {info}"
            );
            if info["hasNextPage"] == false {
                break;
            }
            after = info["endCursor"].clone();
        }
        assert_eq!(forward.len(), expected);
        assert_eq!(pages, expected.div_ceil(size));

        let mut backward: Vec<String> = Vec::new();
        let mut before = Value::Null;
        pages = 0;
        loop {
            let (cursors, info) = self.page(json!({ "last": size, "before": before })).await;
            pages += 1;
            assert_eq!(info["hasNextPage"], pages > 1, "page {pages} back: {info}");
            assert_eq!(info["startCursor"], json!(cursors.first()), "{info}");
            assert_eq!(info["endCursor"], json!(cursors.last()), "{info}");
            backward.splice(0..0, cursors);
            assert_eq!(
                info["hasPreviousPage"],
                backward.len() < expected,
                "page {pages} back: {info}"
            );
            if info["hasPreviousPage"] == false {
                break;
            }
            before = info["startCursor"].clone();
        }
        assert_eq!(
            backward, forward,
            "backward pages hold the forward ones' rows"
        );
        assert_eq!(pages, expected.div_ceil(size));

        // `after` and `before` together: the rows strictly between, either way.
        let (between, info) = self
            .page(
                json!({ "first": expected, "after": forward[0], "before": forward[expected - 1] }),
            )
            .await;
        assert_eq!(between, forward[1..expected - 1], "{info}");
        assert_eq!(info["hasPreviousPage"], true);
        let (between, info) = self
            .page(json!({ "last": 1, "after": forward[0], "before": forward[expected - 1] }))
            .await;
        assert_eq!(between, forward[expected - 2..expected - 1]);
        assert_eq!(
            (&info["hasPreviousPage"], &info["hasNextPage"]),
            (&json!(expected > 3), &json!(true))
        );
    }

    /// An empty list: no edges, null cursors, no page either side, both ways.
    async fn is_empty(&self) {
        for paging in [json!({}), json!({ "first": 5 }), json!({ "last": 5 })] {
            let (cursors, info) = self.page(paging).await;
            assert!(cursors.is_empty());
            assert_eq!(
                info,
                json!({ "hasNextPage": false, "hasPreviousPage": false, "startCursor": null, "endCursor": null })
            );
        }
    }

    /// Bad paging arguments are refused with `BAD_USER_INPUT`, whatever else is right.
    async fn refuses_bad_arguments(&self) {
        for paging in [
            json!({ "first": 2, "last": 2 }),
            json!({ "last": 0 }),
            json!({ "last": -1 }),
            json!({ "last": 101 }),
            json!({ "first": -1 }),
            json!({ "last": 2, "before": "zz" }),
            json!({ "before": "c" }),
            json!({ "first": 2, "last": 2, "after": "c5", "before": "c1" }),
        ] {
            let answer = self.answer(paging.clone()).await;
            assert_eq!(first_code(&answer), "BAD_USER_INPUT", "{paging}: {answer}");
        }
    }
}

#[tokio::test]
async fn remarks_page_forward_and_backward_through_the_same_rows_in_the_same_order() {
    let app = unlimited().await;
    let item = app.create_item().await;
    for author in 1..=7 {
        let input = json!({ "input": { "itemId": item, "score": 4, "content": "fine" } });
        app.data(
            Some(&app.user_token(author)),
            "mutation($input: CreateRemarkInput!) { createRemark(input: $input) { id } }",
            input,
        )
        .await;
    }
    let remarks = List {
        app: &app,
        token: app.user_token(100),
        field: "remarks",
        document: document("$item: ID!,", "remarks", "itemId: $item,"),
        variables: json!({ "item": item }),
    };
    remarks.pages_both_ways(3, 7).await;
    remarks.pages_both_ways(7, 7).await;
    remarks.refuses_bad_arguments().await;

    // The first page without arguments is today's: 20 rows, newest first.
    let (cursors, info) = remarks.page(json!({})).await;
    assert_eq!(cursors.len(), 7);
    assert_eq!(info["hasNextPage"], false);

    let empty = List {
        variables: json!({ "item": app.create_item().await }),
        ..remarks
    };
    empty.is_empty().await;
}

#[tokio::test]
async fn points_history_pages_forward_and_backward_through_the_same_rows_in_the_same_order() {
    let app = unlimited().await;
    let service = app.token(900, Role::Service);
    let award = "mutation($k: String!) { awardPoints(userId: \"31\", type: LEARNING, points: 1, \
                 idempotencyKey: $k) { awarded } }";
    for key in 0..5 {
        app.data(
            Some(&service),
            award,
            json!({ "k": format!("paging-{key}") }),
        )
        .await;
    }
    let history = List {
        app: &app,
        token: app.user_token(31),
        field: "pointsHistory",
        document: document("", "pointsHistory", ""),
        variables: json!({}),
    };
    eventually(async || history.page(json!({ "first": 10 })).await.0.len() == 5).await;
    history.pages_both_ways(2, 5).await;
    history.refuses_bad_arguments().await;

    let empty = List {
        token: app.user_token(32),
        ..history
    };
    empty.is_empty().await;
}

#[tokio::test]
async fn my_orders_and_the_nearby_search_answer_every_page_info_field() {
    let app = unlimited().await;
    let token = app.user_token(41);
    let orders = List {
        app: &app,
        token: token.clone(),
        field: "myOrders",
        document: document("", "myOrders", ""),
        variables: json!({}),
    };
    orders.is_empty().await;
    orders.refuses_bad_arguments().await;

    // The nearby search pages forward only: no `last` to ask for.
    let nearby = format!("{{ nearbyItems(lat: 0, lng: 0, radiusKm: 1) {{ {PAGE_INFO} }} }}");
    let data = app.data(Some(&token), &nearby, json!({})).await;
    assert_eq!(
        data["nearbyItems"]["pageInfo"],
        json!({ "hasNextPage": false, "hasPreviousPage": false, "startCursor": null, "endCursor": null })
    );
    let backward = nearby.replace("radiusKm: 1", "radiusKm: 1, last: 2");
    let answer = app.gql(Some(&token), &backward, json!({})).await;
    assert_eq!(first_code(&answer), "GRAPHQL_VALIDATION_FAILED", "{answer}");
}

#[tokio::test]
async fn an_offset_list_has_a_previous_page_once_past_its_start() {
    let app = unlimited().await;
    let admin = app.admin_token();
    for name in ["near", "nearer", "nearest"] {
        let input = json!({ "input": { "name": name, "lat": 10.0, "lng": 20.0 } });
        app.data(
            Some(&admin),
            "mutation($input: CreateItemInput!) { createItem(input: $input) { id } }",
            input,
        )
        .await;
    }
    let nearby = List {
        app: &app,
        token: app.user_token(51),
        field: "nearbyItems",
        document: format!(
            "query($first: Int, $after: String) {{ nearbyItems(lat: 10.0, lng: 20.0, \
             radiusKm: 5, first: $first, after: $after) {{ edges {{ cursor }} {PAGE_INFO} }} }}"
        ),
        variables: json!({}),
    };
    let mut after = Value::Null;
    for page in 0..3 {
        let (cursors, info) = nearby.page(json!({ "first": 1, "after": after })).await;
        assert_eq!(cursors.len(), 1);
        assert_eq!(info["hasPreviousPage"], page > 0, "{info}");
        assert_eq!(info["hasNextPage"], page < 2, "{info}");
        assert_eq!(info["startCursor"], json!(cursors[0]));
        assert_eq!(info["endCursor"], json!(cursors[0]));
        after = info["endCursor"].clone();
    }
}

/// An app whose feed pushes to at most one follower: a user with two followers is pulled.
async fn feed_app() -> TestApp {
    TestApp::spawn_with(|config| {
        harness::unlimited(config);
        config.feed.feed_push_limit = 1;
    })
    .await
}

async fn follow(app: &TestApp, follower: i64, followee: i64) {
    for user in [follower, followee] {
        app.data(Some(&app.user_token(user)), "{ viewer { id } }", json!({}))
            .await;
    }
    app.data(
        Some(&app.user_token(follower)),
        "mutation($u: ID!) { follow(userId: $u) }",
        json!({ "u": followee.to_string() }),
    )
    .await;
}

/// A remark by `author` on a new item; its id.
async fn remark_by(app: &TestApp, author: i64) -> String {
    let item = app.create_item().await;
    app.data(
        Some(&app.user_token(author)),
        "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 4, content: \"nice\" }) { id } }",
        json!({ "i": item }),
    )
    .await["createRemark"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn feed(app: &TestApp, reader: i64) -> List<'_> {
    List {
        app,
        token: app.user_token(reader),
        field: "feed",
        document: document("", "feed", ""),
        variables: json!({}),
    }
}

#[tokio::test]
async fn the_feed_pages_backward_through_its_inbox_and_outboxes_as_it_pages_forward() {
    let app = feed_app().await;
    // 11 is pushed to the reader's inbox; 12 has two followers and is pulled from its outbox.
    follow(&app, 1, 11).await;
    follow(&app, 1, 12).await;
    follow(&app, 2, 12).await;
    for author in [11, 12, 12, 11, 12, 11, 11] {
        remark_by(&app, author).await;
    }
    crate::harness::streams_settled(&app, &[app.keys().remark_stream()], "fanout").await;
    let reader = feed(&app, 1);
    reader.pages_both_ways(2, 7).await;
    reader.pages_both_ways(3, 7).await;
    reader.refuses_bad_arguments().await;
    feed(&app, 3).is_empty().await;
}

#[tokio::test]
async fn feed_entries_of_one_millisecond_page_backward_in_their_forward_order() {
    let app = feed_app().await;
    follow(&app, 1, 21).await;
    let ids: Vec<String> = futures::future::join_all((0..5).map(|_| remark_by(&app, 21))).await;
    crate::harness::streams_settled(&app, &[app.keys().remark_stream()], "fanout").await;
    // Five entries in the same millisecond, as a burst would give.
    let mut conn = app.redis_connection().await;
    let inbox = app.keys().feed_inbox(1);
    let () = redis::cmd("DEL")
        .arg(&inbox)
        .query_async(&mut *conn)
        .await
        .unwrap();
    for id in &ids {
        let member = format!("{:020}:21", local_id(id));
        let _: i64 = redis::cmd("ZADD")
            .arg(&inbox)
            .arg(1_700_000_000_000_i64)
            .arg(member)
            .query_async(&mut *conn)
            .await
            .unwrap();
    }
    drop(conn);
    feed(&app, 1).pages_both_ways(2, 5).await;
}

#[tokio::test]
async fn my_orders_page_forward_and_backward_through_the_same_rows_in_the_same_order() {
    let app = unlimited().await;
    let buyer = app.user_token(61);
    for _ in 0..5 {
        let voucher = app.create_voucher(5, 600).await;
        app.seckill(&buyer, &voucher).await;
    }
    let orders = List {
        app: &app,
        token: buyer,
        field: "myOrders",
        document: document("", "myOrders", ""),
        variables: json!({}),
    };
    eventually(async || orders.page(json!({ "first": 10 })).await.0.len() == 5).await;
    orders.pages_both_ways(2, 5).await;
}
