//! Where Redis is: one node, or the seed nodes of a cluster, and the certificate authority
//! their TLS certificates chain to. Every connection of an instance (requests, the live hub,
//! the stream consumers) is made from here, so they all reach the same servers the same way.

use std::{path::Path, sync::Arc};

use anyhow::{bail, Context};
use redis::{cluster::ClusterClientBuilder, ConnectionAddr, IntoConnectionInfo, TlsCertificates};

use super::RedisMode;

#[derive(Clone)]
pub struct RedisTarget {
    pub(crate) mode: RedisMode,
    /// The one node's URL, or a cluster's seed nodes.
    pub(crate) urls: Vec<String>,
    /// A private certificate authority (PEM, `ENGAGE_REDIS_CA_FILE`).
    ca: Option<Arc<Vec<u8>>>,
}

impl RedisTarget {
    /// `url` is `REDIS_URL`: one URL, or in cluster mode a comma-separated seed list.
    pub fn new(url: &str, mode: RedisMode, ca_file: Option<&Path>) -> anyhow::Result<Self> {
        let urls: Vec<String> = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(String::from)
            .collect();
        if urls.is_empty() {
            bail!("REDIS_URL is empty");
        }
        if urls.len() > 1 && mode != RedisMode::Cluster {
            bail!(
                "REDIS_URL lists {} nodes, a cluster's seeds: set ENGAGE_REDIS_MODE=cluster",
                urls.len()
            );
        }
        let mut tls = Vec::new();
        for url in &urls {
            let info = url
                .as_str()
                .into_connection_info()
                .with_context(|| format!("REDIS_URL: {url} is not a valid Redis URL"))?;
            tls.push(matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
        }
        if tls.iter().any(|&t| t != tls[0]) {
            bail!("REDIS_URL mixes redis:// and rediss:// nodes");
        }
        let ca = match ca_file {
            Some(_) if !tls[0] => {
                bail!("ENGAGE_REDIS_CA_FILE is set, but REDIS_URL is not rediss:// (TLS)")
            }
            Some(path) => Some(Arc::new(std::fs::read(path).with_context(|| {
                format!("ENGAGE_REDIS_CA_FILE: cannot read {}", path.display())
            })?)),
            None => None,
        };
        Ok(Self { mode, urls, ca })
    }

    pub fn is_cluster(&self) -> bool {
        self.mode == RedisMode::Cluster
    }

    /// A client of the one node (the standalone modes).
    pub(crate) fn client(&self) -> redis::RedisResult<redis::Client> {
        let url = self.urls[0].as_str();
        match &self.ca {
            Some(ca) => redis::Client::build_with_tls(url, certificates(ca)),
            None => redis::Client::open(url),
        }
    }

    /// A client of one node of the cluster, `host:port`, made as the first seed's is
    /// (credentials, TLS, the configured authority).
    pub(crate) fn node_client(&self, addr: &str) -> redis::RedisResult<redis::Client> {
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "a cluster node's address is not host:port",
                    addr.to_owned(),
                ))
            })?;
        let seed = self.urls[0].as_str().into_connection_info()?;
        let addr = match seed.addr().clone() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let info = seed.set_addr(addr);
        match &self.ca {
            Some(ca) => redis::Client::build_with_tls(info, certificates(ca)),
            None => redis::Client::open(info),
        }
    }

    /// The seeds' addresses, `host:port`.
    pub(crate) fn seed_addrs(&self) -> Vec<String> {
        self.urls
            .iter()
            .filter_map(
                |url| match url.as_str().into_connection_info().ok()?.addr() {
                    ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                        Some(format!("{host}:{port}"))
                    }
                    _ => None,
                },
            )
            .collect()
    }

    /// Whether the nodes speak TLS (`rediss://`).
    pub(crate) fn is_tls(&self) -> bool {
        self.ca.is_some() || self.urls[0].starts_with("rediss://")
    }

    /// A builder of cluster clients, seeded and trusting the configured authority.
    pub(crate) fn cluster(&self) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(self.urls.clone());
        match &self.ca {
            Some(ca) => builder.certs(certificates(ca)),
            None => builder,
        }
    }

    /// The URLs as configured, for messages.
    pub(crate) fn describe(&self) -> String {
        self.urls.join(",")
    }
}

fn certificates(ca: &[u8]) -> TlsCertificates {
    TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_list_needs_cluster_mode_and_one_scheme() {
        let seeds = "redis://127.0.0.1:7001, redis://127.0.0.1:7002";
        assert!(RedisTarget::new(seeds, RedisMode::Shared, None).is_err());
        let target = RedisTarget::new(seeds, RedisMode::Cluster, None).unwrap();
        assert_eq!(target.urls.len(), 2);
        let mixed = "redis://127.0.0.1:7001,rediss://127.0.0.1:7002";
        assert!(RedisTarget::new(mixed, RedisMode::Cluster, None).is_err());
        assert!(RedisTarget::new("", RedisMode::Shared, None).is_err());
    }

    #[test]
    fn a_ca_file_is_for_tls_urls_only() {
        let ca = Path::new("/nonexistent/ca.pem");
        let plain = RedisTarget::new("redis://127.0.0.1:6379", RedisMode::Shared, Some(ca));
        assert!(plain.err().unwrap().to_string().contains("not rediss://"));
        let unreadable = RedisTarget::new("rediss://127.0.0.1:6379", RedisMode::Shared, Some(ca));
        assert!(unreadable
            .err()
            .unwrap()
            .to_string()
            .contains("cannot read"));
    }
}
