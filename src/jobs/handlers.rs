//! Who runs a job: an in-process handler registered for its topic (our own work: order
//! expiry, …), or, for admin-scheduled jobs with a `callbackUrl`, an HTTP POST of the body.
//!
//! Callbacks go only to hosts on `ENGAGE_CALLBACK_HOSTS`. The host is resolved once and the
//! request pinned to the checked address (no second lookup to rebind), redirects are not
//! followed, and an address that is loopback, private, link-local or otherwise internal is
//! refused unless that address itself is listed: a listed name that resolves inward is
//! still refused (no server-side request forgery).

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, SocketAddr},
    sync::{Arc, RwLock},
    time::Duration,
};

use reqwest::Url;

use super::{JobSpec, DEFAULT_LADDER};
use crate::{
    config::Config,
    error::{AppError, AppResult},
};

/// One delivery of a job to a handler.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub topic: String,
    pub spec: JobSpec,
    /// 1 for the first delivery.
    pub attempt: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Try again later, on the topic's ladder.
    #[error("{0}")]
    Retry(String),
    /// Retrying cannot help: the job goes to `dead_job` now.
    #[error("{0}")]
    Permanent(String),
}

#[async_trait::async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// Runs a job. Delivery is at least once: a handler must tolerate a repeat.
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError>;
}

#[derive(Debug, Clone)]
pub struct TopicPolicy {
    /// Waits before the 2nd, 3rd, … delivery; the last step repeats.
    pub ladder: Vec<Duration>,
    /// How long a taken job stays invisible to other workers.
    pub visibility: Duration,
}

impl TopicPolicy {
    pub fn retry_delay(&self, attempt: u32) -> Duration {
        let step = (attempt.max(1) as usize - 1).min(self.ladder.len().saturating_sub(1));
        self.ladder
            .get(step)
            .copied()
            .unwrap_or(Duration::from_secs(60))
    }
}

/// A topic's handler with its retry policy.
type Registered = (Arc<dyn JobHandler>, TopicPolicy);

pub struct JobRegistry {
    handlers: RwLock<HashMap<String, Registered>>,
    default_policy: TopicPolicy,
    callbacks: Callbacks,
}

impl JobRegistry {
    pub fn from_config(config: &Config) -> Self {
        Self {
            handlers: RwLock::new(HashMap::new()),
            default_policy: TopicPolicy {
                ladder: DEFAULT_LADDER
                    .iter()
                    .map(|s| Duration::from_secs(*s))
                    .collect(),
                visibility: Duration::from_secs(config.jobs_visibility_seconds.max(1)),
            },
            callbacks: Callbacks::from_config(config),
        }
    }

    /// Registers the in-process handler of a topic (its policy defaults to the seed's
    /// ladder and the configured visibility).
    pub fn register(&self, topic: &str, handler: Arc<dyn JobHandler>, policy: Option<TopicPolicy>) {
        let policy = policy.unwrap_or_else(|| self.default_policy.clone());
        self.handlers
            .write()
            .expect("poisoned")
            .insert(topic.to_string(), (handler, policy));
    }

    pub fn policy(&self, topic: &str) -> TopicPolicy {
        self.handlers
            .read()
            .expect("poisoned")
            .get(topic)
            .map_or_else(|| self.default_policy.clone(), |(_, policy)| policy.clone())
    }

    pub fn registered_topics(&self) -> Vec<String> {
        self.handlers
            .read()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// Runs one delivery with its topic's handler, or its callback.
    pub async fn run(&self, delivery: &Delivery) -> Result<(), JobError> {
        if let Some(url) = &delivery.spec.callback_url {
            return self.callbacks.post(url, delivery).await;
        }
        let handler = self
            .handlers
            .read()
            .expect("poisoned")
            .get(&delivery.topic)
            .map(|(h, _)| h.clone());
        match handler {
            Some(handler) => handler.handle(delivery).await,
            None => Err(JobError::Retry(format!(
                "no handler for topic {} on this instance",
                delivery.topic
            ))),
        }
    }
}

/// A callback URL must be plain http(s) with a host and no credentials.
pub fn check_callback_syntax(url: &str) -> AppResult<()> {
    let parsed = Url::parse(url).map_err(|_| AppError::bad_input("callbackUrl is not a URL"))?;
    let ok = matches!(parsed.scheme(), "http" | "https")
        && parsed.host_str().is_some()
        && parsed.username().is_empty()
        && parsed.password().is_none();
    if ok {
        Ok(())
    } else {
        Err(AppError::bad_input(
            "callbackUrl must be an http(s) URL with a host and no credentials",
        ))
    }
}

struct Callbacks {
    /// Lower-case `host` or `host:port` entries.
    allowed: HashSet<String>,
    timeout: Duration,
}

impl Callbacks {
    fn from_config(config: &Config) -> Self {
        Self {
            allowed: config
                .callback_hosts
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            timeout: Duration::from_secs(config.callback_timeout_seconds.max(1)),
        }
    }

    fn lists(&self, host: &str, port: u16) -> bool {
        self.allowed.contains(host) || self.allowed.contains(&format!("{host}:{port}"))
    }

    /// The address to call, or why not. Makes no request.
    async fn resolve(&self, url: &Url) -> Result<SocketAddr, JobError> {
        let refuse = |why: String| JobError::Permanent(why);
        let host = url
            .host_str()
            .ok_or_else(|| refuse("callback URL has no host".into()))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let port = url.port_or_known_default().unwrap_or(80);
        if !self.lists(&host, port) {
            return Err(refuse(format!(
                "callback host {host}:{port} is not on ENGAGE_CALLBACK_HOSTS"
            )));
        }
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| JobError::Retry(format!("cannot resolve callback host {host}: {e}")))?
            .collect();
        let first = *addresses
            .first()
            .ok_or_else(|| JobError::Retry(format!("{host} has no address")))?;
        for address in &addresses {
            let ip = address.ip();
            if is_internal(ip) && !self.lists(&ip.to_string(), port) {
                return Err(refuse(format!(
                    "callback host {host} resolves to the internal address {ip}, which is not listed"
                )));
            }
        }
        Ok(first)
    }

    async fn post(&self, url: &str, delivery: &Delivery) -> Result<(), JobError> {
        let url =
            Url::parse(url).map_err(|_| JobError::Permanent("callback URL is not a URL".into()))?;
        let address = self.resolve(&url).await?;
        let host = url.host_str().unwrap_or_default().to_string();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .resolve(&host, address)
            .build()
            .map_err(|e| JobError::Retry(format!("callback client: {e}")))?;
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .header("x-engage-job-id", &delivery.id)
            .header("x-engage-job-topic", &delivery.topic)
            .header("x-engage-job-attempt", delivery.attempt.to_string())
            .body(delivery.spec.body.clone())
            .send()
            .await
            .map_err(|e| JobError::Retry(format!("callback failed: {e}")))?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(JobError::Retry(format!(
                "callback answered {}",
                response.status()
            )))
        }
    }
}

/// Loopback, private, link-local, shared, unspecified, broadcast, multicast or documentation.
fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // shared address space
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_recognised() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_ladder_repeats_its_last_step() {
        let policy = TopicPolicy {
            ladder: vec![Duration::from_secs(15), Duration::from_secs(180)],
            visibility: Duration::from_secs(1),
        };
        assert_eq!(policy.retry_delay(1), Duration::from_secs(15));
        assert_eq!(policy.retry_delay(2), Duration::from_secs(180));
        assert_eq!(policy.retry_delay(9), Duration::from_secs(180));
    }
}
