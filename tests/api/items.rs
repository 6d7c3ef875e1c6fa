//! Items: created by admins, read by anyone.

use serde_json::json;

use crate::harness::{first_code, global_id, local_id, unlimited, TestApp};

const CREATE: &str = "mutation($input: CreateItemInput!) { createItem(input: $input) { id name lat lng createdAt } }";

#[tokio::test]
async fn an_item_created_by_an_admin_can_be_read_back() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    let created = app
        .data(Some(&admin), CREATE, json!({ "input": { "name": "  Harbour Noodle Bar ", "lat": 31.2304, "lng": 121.4737 } }))
        .await["createItem"]
        .clone();
    assert_eq!(created["name"], "Harbour Noodle Bar");
    let id = created["id"].as_str().unwrap();
    assert_eq!(id, global_id("Item", local_id(id)), "an Item's global id");

    let read = app
        .data(
            None,
            "query($id: ID!) { item(id: $id) { id name lat lng } }",
            json!({ "id": id }),
        )
        .await;
    assert_eq!(
        read["item"],
        json!({ "id": id, "name": "Harbour Noodle Bar", "lat": 31.2304, "lng": 121.4737 })
    );

    let missing = app
        .data(None, "{ item(id: \"12345\") { id } }", json!({}))
        .await;
    assert_eq!(missing["item"], serde_json::Value::Null);
}

#[tokio::test]
async fn items_with_a_location_are_created_after_items_without_one() {
    // One after the other, so that they share the pool's connections and the statements
    // each connection prepared for the items before them.
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    for n in 0..6 {
        let input = json!({ "input": { "name": format!("Stall {n}") } });
        let created = app.data(Some(&admin), CREATE, input).await;
        assert_eq!(created["createItem"]["lat"], serde_json::Value::Null);
    }
    for n in 0..6 {
        let input =
            json!({ "input": { "name": format!("Kiosk {n}"), "lat": 31.23, "lng": 121.47 } });
        let created = app.data(Some(&admin), CREATE, input).await;
        assert_eq!(created["createItem"]["lat"], 31.23, "{created}");
    }
}

#[tokio::test]
async fn bad_item_input_is_a_bad_user_input() {
    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    for input in [
        json!({ "name": "" }),
        json!({ "name": "x".repeat(201) }),
        json!({ "name": "ok", "lat": 91.0, "lng": 0.0 }),
        json!({ "name": "ok", "lat": 10.0, "lng": 181.0 }),
        json!({ "name": "ok", "lat": 10.0 }),
    ] {
        let body = app
            .gql(Some(&admin), CREATE, json!({ "input": input }))
            .await;
        assert_eq!(first_code(&body), "BAD_USER_INPUT", "{input}: {body}");
    }
    let body = app
        .gql(None, "{ item(id: \"not-a-number\") { id } }", json!({}))
        .await;
    assert_eq!(first_code(&body), "BAD_USER_INPUT");
}

const RATINGS: &str =
    "query($id: ID!) { item(id: $id) { ratingCount ratingAverage ratingHistogram } }";

/// An app without the per-address and per-user limits.
async fn busy_app() -> TestApp {
    TestApp::spawn_with(unlimited).await
}

#[tokio::test]
async fn ratings_stay_exact_under_concurrent_creates_edits_and_deletes() {
    let app = busy_app().await;
    let item = app.create_item().await;
    let empty = app.data(None, RATINGS, json!({ "id": item })).await;
    assert_eq!(
        empty["item"],
        json!({ "ratingCount": 0, "ratingAverage": null, "ratingHistogram": [0, 0, 0, 0, 0] })
    );

    // Sixty authors review at once, each with 1 to 5 stars.
    let create = "mutation($i: ID!, $s: Int!) { createRemark(input: { itemId: $i, score: $s, content: \"ok\" }) { id } }";
    let authors: Vec<i64> = (1..=60).collect();
    let ids: Vec<String> = futures::future::join_all(authors.iter().map(|&author| {
        let (app, item) = (&app, &item);
        async move {
            app.data(
                Some(&app.user_token(author)),
                create,
                json!({ "i": item, "s": author % 5 + 1 }),
            )
            .await["createRemark"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    }))
    .await;

    // At once: the first twenty edit to 5 stars (twice each, the two racing), the next
    // ten delete, an admin hides five more.
    let edit = "mutation($id: ID!, $s: Int) { editRemark(id: $id, content: \"edited\", score: $s) { id } }";
    let delete = "mutation($id: ID!) { deleteRemark(id: $id) }";
    let hide = "mutation($id: ID!) { hideRemark(id: $id, reason: \"off topic\") { id } }";
    let mut calls = Vec::new();
    for (i, (author, id)) in authors.iter().zip(&ids).enumerate() {
        let token = app.user_token(*author);
        let (app, id) = (&app, id.clone());
        calls.push(async move {
            if i < 20 {
                let twice = futures::future::join_all(
                    (0..2).map(|_| app.gql(Some(&token), edit, json!({ "id": id, "s": 5 }))),
                )
                .await;
                for body in twice {
                    assert!(body["errors"].is_null(), "{body}");
                }
            } else if i < 30 {
                app.data(Some(&token), delete, json!({ "id": id })).await;
            } else if i < 35 {
                app.data(Some(&app.admin_token()), hide, json!({ "id": id }))
                    .await;
            }
        });
    }
    futures::future::join_all(calls).await;

    // Expected: 20 at five stars, and the 25 untouched remarks from the 36th author on.
    let mut histogram = [0i64; 5];
    histogram[4] += 20;
    for author in &authors[35..] {
        histogram[(author % 5) as usize] += 1;
    }
    let count: i64 = histogram.iter().sum();
    let total: i64 = histogram
        .iter()
        .enumerate()
        .map(|(i, n)| (i as i64 + 1) * n)
        .sum();
    let rated = app.data(None, RATINGS, json!({ "id": item })).await;
    assert_eq!(rated["item"]["ratingCount"], count);
    assert_eq!(rated["item"]["ratingHistogram"], json!(histogram));
    let average = rated["item"]["ratingAverage"].as_f64().unwrap();
    assert!(
        (average - total as f64 / count as f64).abs() < 1e-9,
        "{average}"
    );

    let reports = app.verify_all().await.unwrap();
    let ratings = reports.iter().find(|r| r.feature == "ratings").unwrap();
    assert!(ratings.is_clean(), "{:?}", ratings.examples);

    // A summary that drifted is written again from the remarks by a rebuild.
    sqlx::query("UPDATE item_ratings SET stars_5 = stars_5 + 7 WHERE item_id = $1")
        .bind(local_id(&item))
        .execute(app.sql())
        .await
        .unwrap();
    let drifted = app.verify_all().await.unwrap();
    assert!(!drifted
        .iter()
        .find(|r| r.feature == "ratings")
        .unwrap()
        .is_clean());
    app.rebuild_from_sql().await.unwrap();
    let again = app.data(None, RATINGS, json!({ "id": item })).await;
    assert_eq!(again["item"]["ratingHistogram"], json!(histogram));
}

#[tokio::test]
async fn items_list_newest_first_or_by_distance() {
    let app = busy_app().await;
    let create = "mutation($input: CreateItemInput!) { createItem(input: $input) { id } }";
    let mut ids = Vec::new();
    for (name, lat, lng) in [
        ("far", 31.0, 121.0),
        ("near", 31.2304, 121.4737),
        ("nearer", 31.2305, 121.4738),
    ] {
        let made = app
            .data(
                Some(&app.admin_token()),
                create,
                json!({ "input": { "name": name, "lat": lat, "lng": lng } }),
            )
            .await;
        ids.push(made["createItem"]["id"].as_str().unwrap().to_string());
    }
    let query =
        "query($after: String, $near: GeoInput) { items(first: 2, after: $after, near: $near) {
        edges { node { id ratingCount } } pageInfo { hasNextPage endCursor } } }";
    let page = |body: &serde_json::Value| -> Vec<String> {
        body["items"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .map(|edge| edge["node"]["id"].as_str().unwrap().to_string())
            .collect()
    };
    let first = app.data(None, query, json!({})).await;
    assert_eq!(page(&first), [ids[2].clone(), ids[1].clone()]);
    let second = app
        .data(
            None,
            query,
            json!({ "after": first["items"]["pageInfo"]["endCursor"] }),
        )
        .await;
    assert_eq!(page(&second), [ids[0].clone()]);
    assert_eq!(second["items"]["pageInfo"]["hasNextPage"], false);

    let near = json!({ "lat": 31.23045, "lng": 121.47375, "radiusKm": 5.0 });
    let close = app.data(None, query, json!({ "near": near })).await;
    let found = page(&close);
    assert_eq!(found.len(), 2, "{close}");
    assert!(found.contains(&ids[1]) && found.contains(&ids[2]));
    assert!(
        !found.contains(&ids[0]),
        "the far item is outside the radius"
    );
}

#[tokio::test]
async fn the_most_active_item_has_the_most_remarks_and_likes() {
    use crate::harness::eventually;

    let app = TestApp::spawn().await;
    let admin = app.admin_token();
    const MOST: &str = "{ mostActiveItem { id } }";
    assert_eq!(
        app.data(None, MOST, json!({})).await["mostActiveItem"],
        serde_json::Value::Null,
        "no remark yet"
    );
    let mut items = Vec::new();
    for name in ["Quiet Cafe", "Busy Market"] {
        items.push(
            app.data(Some(&admin), CREATE, json!({ "input": { "name": name } }))
                .await["createItem"]["id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let remark = |user: i64, item: &str| {
        let (app, item) = (&app, item.to_string());
        async move {
            app.data(
                Some(&app.user_token(user)),
                "mutation($i: ID!) { createRemark(input: { itemId: $i, score: 4, content: \"ok\" }) { id } }",
                json!({ "i": item }),
            )
            .await["createRemark"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    // Two remarks on the cafe, one on the market: the cafe leads.
    remark(1, &items[0]).await;
    remark(2, &items[0]).await;
    let market = remark(3, &items[1]).await;
    assert_eq!(
        app.data(None, MOST, json!({})).await["mostActiveItem"]["id"],
        items[0]
    );
    // Three likes on the market's remark: its four beat the cafe's two, once archived.
    for fan in 10..13 {
        app.data(
            Some(&app.user_token(fan)),
            "mutation($id: ID!) { likeRemark(remarkId: $id) { likeCount } }",
            json!({ "id": market }),
        )
        .await;
    }
    eventually(async || {
        app.data(None, MOST, json!({})).await["mostActiveItem"]["id"] == items[1].as_str()
    })
    .await;
}
