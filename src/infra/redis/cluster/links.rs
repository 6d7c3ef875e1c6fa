//! The instance's connections to the masters, and its table of which master owns each slot.

use std::{
    sync::{atomic::Ordering, Arc},
    time::Instant,
};

use redis::{aio::MultiplexedConnection, RedisResult};

use super::{
    no_master, not_connected, parse_shards, Addr, Cluster, NodeLink, CONNECT_COOLDOWN, REFRESH_GAP,
    REFRESH_TIMEOUT,
};

impl Cluster {
    /// The master of `slot`, or any master for `None`.
    pub(super) fn master_of(&self, slot: Option<u16>) -> RedisResult<Addr> {
        let topology = self.inner.topology.lock().expect("poisoned");
        let master = match slot {
            Some(slot) => topology.master_of(slot).cloned(),
            None => {
                let masters = topology.masters();
                (!masters.is_empty()).then(|| masters[rand::random_range(0..masters.len())].clone())
            }
        };
        master.ok_or_else(|| no_master(slot))
    }

    /// The connection to `addr`, made if there is none.
    pub(super) async fn connection(
        &self,
        addr: &str,
    ) -> RedisResult<(Arc<NodeLink>, MultiplexedConnection)> {
        let link = self
            .inner
            .links
            .lock()
            .expect("poisoned")
            .entry((addr.to_owned(), self.lane))
            .or_default()
            .clone();
        if let Some(conn) = link.conn.get() {
            return Ok((link.clone(), conn.clone()));
        }
        let refused_lately = link
            .refused_at
            .lock()
            .expect("poisoned")
            .is_some_and(|at| at.elapsed() < CONNECT_COOLDOWN);
        if refused_lately {
            return Err(not_connected(addr, "refused a connection just now"));
        }
        let made = link
            .conn
            .get_or_try_init(|| async {
                let client = self.inner.target.node_client(addr)?;
                client
                    .get_multiplexed_async_connection_with_config(&self.inner.config)
                    .await
            })
            .await
            .cloned();
        match made {
            Ok(conn) => Ok((link, conn)),
            Err(error) => {
                *link.refused_at.lock().expect("poisoned") = Some(Instant::now());
                self.refresh_soon();
                tracing::debug!(addr, %error, "a cluster node refused a connection");
                Err(not_connected(addr, "does not accept a connection"))
            }
        }
    }

    /// Drops a broken connection, so that the next command connects afresh.
    pub(super) fn forget(&self, addr: &str, link: &Arc<NodeLink>) {
        let key = (addr.to_owned(), self.lane);
        let mut links = self.inner.links.lock().expect("poisoned");
        if links
            .get(&key)
            .is_some_and(|known| Arc::ptr_eq(known, link))
        {
            links.remove(&key);
        }
    }

    /// Refreshes the slot table in the background, unless a refresh is under way or was
    /// made within `REFRESH_GAP`.
    pub(super) fn refresh_soon(&self) {
        if self.inner.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let cluster = self.clone();
        tokio::spawn(async move {
            if let Err(error) = cluster.refresh().await {
                tracing::debug!(%error, "the cluster's slots could not be refreshed");
            }
            tokio::time::sleep(REFRESH_GAP).await;
            cluster.inner.refreshing.store(false, Ordering::Release);
        });
    }

    /// Asks the known masters, then the seeds, for `CLUSTER SHARDS`; the first answer with
    /// a master in it is taken in.
    pub(super) async fn refresh(&self) -> RedisResult<()> {
        let tls = self.inner.target.is_tls();
        let mut asked = self.masters();
        asked.extend(self.inner.target.seed_addrs());
        let shards = redis::cmd("CLUSTER").arg("SHARDS").clone();
        let mut last_error = no_master(None);
        for addr in asked {
            match tokio::time::timeout(REFRESH_TIMEOUT, self.query_on(&addr, &shards)).await {
                Ok(Ok(reply)) => {
                    let shards = parse_shards(&reply, &addr, tls);
                    if shards.iter().any(|shard| shard.master.is_some()) {
                        self.inner
                            .topology
                            .lock()
                            .expect("poisoned")
                            .update(&shards);
                        return Ok(());
                    }
                }
                Ok(Err(error)) => last_error = error,
                Err(_) => last_error = not_connected(&addr, "did not answer CLUSTER SHARDS"),
            }
        }
        Err(last_error)
    }
}
