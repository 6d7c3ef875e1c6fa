//! A live dashboard for the load generators: one `likeCountChanged` subscription
//! (graphql-transport-ws) over a set of remarks, recording when each update arrived, and
//! subscribing again when the server ends it or answers an error (as the dashboard does).

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::{client::IntoClientRequest, Message};

/// One update: when it arrived (since `began`), the remark, its count.
pub type Update = (Duration, i64, i64);

pub struct LiveWatcher {
    pub updates: Arc<Mutex<Vec<Update>>>,
    /// Messages other than updates (errors, completion, the socket's end), with their time.
    pub other: Arc<Mutex<Vec<(Duration, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LiveWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LiveWatcher {
    /// Subscribes at `ws_url` to the counts of `remarks` and records every update.
    pub async fn start(ws_url: &str, remarks: &[i64], began: Instant) -> anyhow::Result<Self> {
        let mut request = ws_url.into_client_request()?;
        request
            .headers_mut()
            .insert("sec-websocket-protocol", "graphql-transport-ws".parse()?);
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await?;
        let init = json!({ "type": "connection_init", "payload": {} });
        socket.send(Message::text(init.to_string())).await?;
        let ids: Vec<String> = remarks
            .iter()
            .map(|remark| crate::support::global_id("Remark", remark))
            .collect();
        let subscribe = move |id: &str| {
            json!({ "id": id, "type": "subscribe", "payload": {
            "query": "subscription($ids: [ID!]!) { likeCountChanged(remarkIds: $ids) { remarkId likeCount } }",
            "variables": { "ids": ids } } })
        };
        socket
            .send(Message::text(subscribe("0").to_string()))
            .await?;
        let mut resubscriptions = 0;
        let updates = Arc::new(Mutex::new(Vec::new()));
        let other = Arc::new(Mutex::new(Vec::new()));
        let (recorded, noted) = (updates.clone(), other.clone());
        let note = move |what: String| {
            noted
                .lock()
                .expect("poisoned")
                .push((began.elapsed(), what));
        };
        let task = tokio::spawn(async move {
            loop {
                let message = match socket.next().await {
                    Some(Ok(message)) => message,
                    Some(Err(error)) => {
                        note(format!("socket error: {error}"));
                        break;
                    }
                    None => {
                        note("socket closed".into());
                        break;
                    }
                };
                let text = match message {
                    Message::Text(text) => text,
                    Message::Close(frame) => {
                        note(format!("close: {frame:?}"));
                        continue;
                    }
                    _ => continue,
                };
                let Ok(body) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if body["type"] == "ping" {
                    let _ = socket
                        .send(Message::text(json!({ "type": "pong" }).to_string()))
                        .await;
                    continue;
                }
                let ended = body["type"] == "complete" || body["type"] == "error";
                let failed = body["payload"].get("errors").is_some();
                if body["type"] != "next" || failed {
                    note(text.to_string());
                }
                if ended || failed {
                    // As a dashboard would: subscribe again, under a new id.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    resubscriptions += 1;
                    let again = subscribe(&format!("{resubscriptions}"));
                    if socket.send(Message::text(again.to_string())).await.is_err() {
                        note("resubscription not sent".into());
                        break;
                    }
                    continue;
                }
                if body["type"] != "next" {
                    continue;
                }
                let change = &body["payload"]["data"]["likeCountChanged"];
                let remark = change["remarkId"]
                    .as_str()
                    .and_then(|id| crate::support::local_id(id).ok());
                if let (Some(remark), Some(count)) = (remark, change["likeCount"].as_i64()) {
                    recorded
                        .lock()
                        .expect("poisoned")
                        .push((began.elapsed(), remark, count));
                }
            }
        });
        Ok(Self {
            updates,
            other,
            task,
        })
    }

    /// The last count received for `remark`.
    pub fn last(&self, remark: i64) -> Option<i64> {
        let updates = self.updates.lock().expect("poisoned");
        updates.iter().rev().find(|u| u.1 == remark).map(|u| u.2)
    }

    /// The longest time without an update of `remark` between `from` and `to`.
    pub fn longest_silence(&self, remark: i64, from: Duration, to: Duration) -> Duration {
        let updates = self.updates.lock().expect("poisoned");
        let times = updates.iter().filter(|u| u.1 == remark).map(|u| u.0);
        longest_gap(times, from, to)
    }
}

/// The longest gap between consecutive `times` (sorted) within `from..to`, counting from
/// `from` and up to `to`.
pub fn longest_gap(
    times: impl Iterator<Item = Duration>,
    from: Duration,
    to: Duration,
) -> Duration {
    let mut last = from;
    let mut longest = Duration::ZERO;
    for time in times.filter(|t| *t > from && *t <= to) {
        longest = longest.max(time - last);
        last = time;
    }
    longest.max(to.saturating_sub(last))
}
