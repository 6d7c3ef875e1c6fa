//! Helpers shared by the load generators of `examples/` (included with `#[path]`).

#![allow(dead_code)] // each example uses a part

use std::time::Duration;

use engage::infra::auth::Tokens;
use serde_json::{json, Value};

/// Tokens signed like the server's: `ENGAGE_JWT_SECRET`, or the development secret.
pub fn tokens() -> Tokens {
    let secret = std::env::var("ENGAGE_JWT_SECRET")
        .unwrap_or_else(|_| engage::infra::config::DEV_JWT_SECRET.into());
    Tokens::new(&secret)
}

/// POSTs a GraphQL request and returns the whole body.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    variables: Value,
) -> anyhow::Result<Value> {
    Ok(client
        .post(url)
        .bearer_auth(token)
        .json(&json!({ "query": query, "variables": variables }))
        .send()
        .await?
        .json()
        .await?)
}

/// `data` of a request that must succeed.
pub async fn data(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    query: &str,
    variables: Value,
) -> anyhow::Result<Value> {
    let body = post(client, url, token, query, variables).await?;
    anyhow::ensure!(body.get("errors").is_none(), "errors: {body}");
    Ok(body["data"].clone())
}

/// The `p` quantile (0..1) of sorted latencies, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Redis connections of the load generators wait for slow replies (a pipeline of 10,000
/// ZADD on a busy machine) instead of the crate's 500 ms.
pub fn patient_redis() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)))
}

/// Polls `check` every 100 ms until it holds, for at most 30 s.
pub async fn wait_for<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{what}: not within 30 s")
}

/// Every key of `prefix` on one node (a cluster master holds only its slots' keys).
pub async fn keys_of(
    conn: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    prefix: &str,
) -> anyhow::Result<Vec<String>> {
    use redis::AsyncCommands;
    let mut scan = conn.scan_match::<_, String>(format!("{prefix}*")).await?;
    let mut keys = Vec::new();
    while let Some(key) = futures::StreamExt::next(&mut scan).await {
        keys.push(key?);
    }
    Ok(keys)
}

/// Removes every key of `prefix` on one node, one UNLINK each.
pub async fn unlink_prefix(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> anyhow::Result<()> {
    for key in keys_of(conn, prefix).await? {
        let _: i64 = redis::cmd("UNLINK").arg(key).query_async(conn).await?;
    }
    Ok(())
}

/// Stops an in-process app's background work (consumers, leases), which would otherwise
/// write keys again, then removes every key of its prefix, on one Redis (not a cluster,
/// where one UNLINK of many keys would cross slots). By SCAN, not KEYS: after a full
/// `bench/run` Redis holds millions of keys, and one KEYS over them blocked Redis for longer
/// than a reply may take (3 s), failing the run as it finished.
pub async fn stop_and_unlink_keys(state: &engage::app::AppState) -> anyhow::Result<()> {
    let instance = &state.infra.instance;
    instance.shutdown.cancel();
    instance.tasks.close();
    instance.tasks.wait().await;
    let mut conn = state.infra.redis.get().await?;
    let keys = keys_of(&mut *conn, state.infra.keys.prefix()).await?;
    for page in keys.chunks(1000) {
        let () = redis::cmd("UNLINK")
            .arg(page)
            .query_async(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The global id of object `local` of GraphQL type `type_name`, as the server writes it:
/// the padded base64 of `Type:local`.
pub fn global_id(type_name: &str, local: impl std::fmt::Display) -> String {
    use base64::{engine::general_purpose::STANDARD, Engine};
    STANDARD.encode(format!("{type_name}:{local}"))
}

/// The local part of a global id: `123` of `Remark:123`, `202611` of `Season:202611`.
pub fn local_part(global: &str) -> anyhow::Result<String> {
    use base64::{engine::general_purpose::STANDARD, Engine};
    let decoded = String::from_utf8(STANDARD.decode(global)?)?;
    let (_, local) = decoded
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("{global:?} is not a global id"))?;
    Ok(local.to_string())
}

/// The local id of an object's global id: its row's id in SQL, its keys' in Redis.
pub fn local_id(global: &str) -> anyhow::Result<i64> {
    Ok(local_part(global)?.parse()?)
}
