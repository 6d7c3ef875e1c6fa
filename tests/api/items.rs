//! Items: created by admins, read by anyone.

use serde_json::json;

use crate::harness::{first_code, global_id, local_id, TestApp};

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
