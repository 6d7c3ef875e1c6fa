//! Who runs a job: an in-process handler registered for its topic (our own work: order
//! expiry, …), or, for admin-scheduled jobs with a `callbackUrl`, an HTTP POST of the body.
//!
//! Callbacks go only to hosts on `ENGAGE_CALLBACK_HOSTS`. The host is resolved once and the
//! request pinned to the checked address (no second lookup to rebind, and no proxy, which
//! would look it up again), redirects are not followed, and an address that is loopback,
//! private, link-local or otherwise special-purpose, or an IPv6 translation of IPv4 (NAT64,
//! 6to4, Teredo), is refused unless that address itself is listed: a listed name that
//! resolves inward is still refused (no server-side request forgery).

use std::{
    collections::{HashMap, HashSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, RwLock},
    time::Duration,
};

use reqwest::Url;
use serde::{Deserialize, Serialize};

use super::{JobSpec, JobsSettings, DEFAULT_LADDER};
use crate::infra::error::{AppError, AppResult, ErrorCode};

/// One delivery of a job to a handler.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub id: String,
    pub topic: String,
    pub spec: JobSpec,
    /// 1 for the first delivery.
    pub attempt: u32,
    /// This delivery's lease: what `reportJobProgress` is fenced by (a callback gets it as
    /// `X-Engage-Lease`).
    pub lease: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Try again later, on the topic's ladder.
    #[error("{0}")]
    Retry(String),
    /// Retrying cannot help: the job goes to `dead_job` now.
    #[error("{0}")]
    Permanent(String),
    /// Try again after this long (a callback's `Retry-After`), kept within the topic's
    /// ladder: no sooner than its first step, no later than its last.
    #[error("{0}")]
    RetryAfter(String, Duration),
}

/// How long a job waits before each retry, when it says (`BackoffInput`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, async_graphql::Enum)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BackoffKind {
    /// `delaySeconds` before every retry.
    Fixed,
    /// `delaySeconds` doubled at each retry, up to `maxDelaySeconds`, with jitter: between
    /// half of it and all of it, so that jobs that failed together do not retry together.
    Exponential,
    /// The topic's ladder (15 s, 3 min, … 15 h by default), no step below `delaySeconds`
    /// nor above `maxDelaySeconds`.
    Ladder,
}

/// A job's own backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    pub kind: BackoffKind,
    pub delay_seconds: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_seconds: Option<u32>,
}

impl Backoff {
    /// `BAD_USER_INPUT` unless the delays are in range and in order.
    pub(crate) fn check(&self) -> AppResult<()> {
        let most = super::MAX_DELAY_SECONDS as u32;
        let least = u32::from(self.kind != BackoffKind::Ladder);
        if !(least..=most).contains(&self.delay_seconds) {
            return Err(AppError::bad_input(format!(
                "backoff.delaySeconds must be between {least} and {most}"
            )));
        }
        if let Some(max) = self.max_delay_seconds {
            if max < self.delay_seconds || max > most {
                return Err(AppError::bad_input(format!(
                    "backoff.maxDelaySeconds must be between delaySeconds and {most}"
                )));
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
pub trait JobHandler: Send + Sync + 'static {
    /// Runs a job. Delivery is at least once: a handler must tolerate a repeat.
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError>;
}

#[derive(Debug, Clone)]
pub struct TopicPolicy {
    /// Waits before the 2nd, 3rd, … delivery; the last step repeats.
    pub(crate) ladder: Vec<Duration>,
    /// How long a taken job stays invisible to other workers unless its delivery reports
    /// back; while the handler runs, its deliverer extends it every third of itself.
    pub(crate) visibility: Duration,
    /// Deliveries whose lease ran out (the process running the handler died, or could not
    /// reach Redis for a whole visibility timeout) that a job survives; at the next one it
    /// goes to `dead_job` (BullMQ's `maxStalledCount`). A stall uses none of the attempts.
    pub max_stalls: u32,
    /// The longest a handler may run; the delivery then fails and is retried on the ladder.
    /// (The lease no longer bounds it: it is extended while the handler runs.)
    pub(crate) timeout: Duration,
    /// Attempts of a job that does not say (`maxAttempts`); `None`: one per ladder step,
    /// plus the first.
    pub(crate) attempts: Option<u32>,
}

/// Three, not BullMQ's one: a Redis outage longer than the visibility timeout stalls every
/// running delivery of every instance at once, and a healthy job should survive a few of
/// those; a job that kills its process is still stopped after four runs.
pub(crate) const DEFAULT_MAX_STALLS: u32 = 3;
/// In-process handlers are short (callbacks have their own, shorter, timeout).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl TopicPolicy {
    /// A policy with this ladder and visibility timeout, and the default stall limit and
    /// handler timeout.
    pub fn new(ladder: Vec<Duration>, visibility: Duration) -> Self {
        Self {
            ladder,
            visibility,
            max_stalls: DEFAULT_MAX_STALLS,
            timeout: DEFAULT_TIMEOUT,
            attempts: None,
        }
    }

    /// Attempts of a job of this topic that does not say.
    pub(crate) fn default_attempts(&self) -> u32 {
        self.attempts.unwrap_or(self.ladder.len() as u32 + 1)
    }

    /// The wait before the retry after delivery `attempt` failed: the job's backoff if it
    /// has one, else the ladder; a callback's `Retry-After` instead, kept within the ladder's
    /// first and last steps.
    pub fn delay_after(
        &self,
        attempt: u32,
        backoff: Option<&Backoff>,
        retry_after: Option<Duration>,
    ) -> Duration {
        if let Some(after) = retry_after {
            let least = self
                .ladder
                .iter()
                .min()
                .copied()
                .unwrap_or(Duration::from_secs(1));
            let most = self.ladder.iter().max().copied().unwrap_or(least);
            return after.clamp(least, most.max(least));
        }
        let Some(backoff) = backoff else {
            return self.retry_delay(attempt);
        };
        let delay = Duration::from_secs(u64::from(backoff.delay_seconds));
        let cap = backoff
            .max_delay_seconds
            .map(|s| Duration::from_secs(u64::from(s)));
        match backoff.kind {
            BackoffKind::Fixed => delay,
            BackoffKind::Ladder => {
                let step = self.retry_delay(attempt).max(delay);
                cap.map_or(step, |cap| step.min(cap))
            }
            BackoffKind::Exponential => {
                let doublings = attempt.saturating_sub(1).min(40);
                let grown = delay.saturating_mul(1u32 << doublings.min(31));
                let cap = cap.unwrap_or(Duration::from_secs(super::MAX_DELAY_SECONDS as u64));
                let full = grown.min(cap);
                let half = full / 2;
                half + (full - half).mul_f64(rand::random::<f64>())
            }
        }
    }

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
    pub fn new(settings: &JobsSettings) -> Self {
        Self {
            handlers: RwLock::new(HashMap::new()),
            default_policy: TopicPolicy::new(
                DEFAULT_LADDER
                    .iter()
                    .map(|s| Duration::from_secs(*s))
                    .collect(),
                settings.visibility(),
            ),
            callbacks: Callbacks::new(settings),
        }
    }

    /// Registers the in-process handler of a topic (its policy defaults to
    /// [`super::DEFAULT_LADDER`] and the configured visibility).
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

    /// The topics with an in-process handler here.
    pub(crate) fn topics(&self) -> Vec<String> {
        self.handlers
            .read()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// Whether a job of `topic` with this callback can be delivered at all: a callback to a
    /// host on `ENGAGE_CALLBACK_HOSTS` (`CALLBACK_HOST_NOT_ALLOWED` otherwise), or, without one,
    /// a handler registered for the topic (`NO_JOB_HANDLER`). A job that could not is refused
    /// when scheduled rather than dead-lettered when due. Whether the host resolves to an
    /// address it may reach is still decided at each delivery, when it is resolved.
    pub(crate) fn check_route(&self, topic: &str, callback_url: Option<&str>) -> AppResult<()> {
        match callback_url {
            Some(url) => {
                check_callback_syntax(url)?;
                let parsed =
                    Url::parse(url).map_err(|_| AppError::bad_input("callbackUrl is not a URL"))?;
                let host = parsed
                    .host_str()
                    .unwrap_or_default()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_ascii_lowercase();
                let port = parsed.port_or_known_default().unwrap_or(80);
                if self.callbacks.lists(&host, port) {
                    Ok(())
                } else {
                    Err(AppError::client(
                        ErrorCode::CallbackHostNotAllowed,
                        format!("callback host {host}:{port} is not on ENGAGE_CALLBACK_HOSTS"),
                    ))
                }
            }
            None if self.handlers.read().expect("poisoned").contains_key(topic) => Ok(()),
            None => Err(AppError::client(
                ErrorCode::NoJobHandler,
                format!("topic {topic} has no handler: give the job a callbackUrl"),
            )),
        }
    }

    /// Runs one delivery with its topic's handler, or its callback.
    /// A callback's JSON answer is the job's result; a handler's is none.
    pub(crate) async fn run(&self, delivery: &Delivery) -> Result<Option<String>, JobError> {
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
            Some(handler) => handler.handle(delivery).await.map(|()| None),
            None => Err(JobError::Retry(format!(
                "no handler for topic {} on this instance",
                delivery.topic
            ))),
        }
    }
}

/// A response's `Retry-After`: seconds, or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.timestamp() - chrono::Utc::now().timestamp();
    Some(Duration::from_secs(wait.max(0) as u64))
}

/// A callback URL must be plain http(s) with a host and no credentials.
pub(crate) fn check_callback_syntax(url: &str) -> AppResult<()> {
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
    /// Signs each callback when set ([`super::signing`]).
    secret: Option<Vec<u8>>,
}

impl Callbacks {
    fn new(settings: &JobsSettings) -> Self {
        Self {
            allowed: settings
                .callback_hosts
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect(),
            timeout: settings.callback_timeout(),
            secret: settings
                .callback_secret
                .as_ref()
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec()),
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

    async fn post(&self, url: &str, delivery: &Delivery) -> Result<Option<String>, JobError> {
        let url =
            Url::parse(url).map_err(|_| JobError::Permanent("callback URL is not a URL".into()))?;
        let address = self.resolve(&url).await?;
        let host = url.host_str().unwrap_or_default().to_string();
        // No proxy, whatever the environment says: a proxy would resolve the host again
        // itself, and the checked address would not be the one called.
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.timeout)
            .resolve(&host, address)
            .build()
            .map_err(|e| JobError::Retry(format!("callback client: {e}")))?;
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("x-engage-job-id", &delivery.id)
            .header("x-engage-job-topic", &delivery.topic)
            .header("x-engage-job-attempt", delivery.attempt.to_string())
            .header("x-engage-lease", &delivery.lease);
        if let Some(secret) = &self.secret {
            let now = chrono::Utc::now().timestamp();
            let signed = super::signing::signature(secret, now, delivery.spec.body.as_bytes());
            request = request
                .header("x-engage-timestamp", now.to_string())
                .header("x-engage-signature", signed);
        }
        let response = request
            .body(delivery.spec.body.clone())
            .send()
            .await
            .map_err(|e| JobError::Retry(format!("callback failed: {e}")))?;
        if response.status().is_success() {
            // A JSON answer is kept as the job's result; any other answer is not.
            let body = response.bytes().await.unwrap_or_default();
            let result = (body.len() <= super::MAX_BODY_BYTES)
                .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
                .flatten()
                .map(|value| value.to_string());
            return Ok(result);
        }
        let error = format!("callback answered {}", response.status());
        match retry_after(response.headers()) {
            Some(after) => Err(JobError::RetryAfter(error, after)),
            None => Err(JobError::Retry(error)),
        }
    }
}

/// IPv4 ranges a callback may not reach unless the address itself is listed (the IANA
/// special-purpose registry, plus multicast and reserved space).
const INTERNAL_V4: &[(Ipv4Addr, u8)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8),       // "this network", unspecified
    (Ipv4Addr::new(10, 0, 0, 0), 8),      // private
    (Ipv4Addr::new(100, 64, 0, 0), 10),   // shared address space (carrier-grade NAT)
    (Ipv4Addr::new(127, 0, 0, 0), 8),     // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16),  // link-local (cloud metadata services)
    (Ipv4Addr::new(172, 16, 0, 0), 12),   // private
    (Ipv4Addr::new(192, 0, 0, 0), 24),    // IETF protocol assignments
    (Ipv4Addr::new(192, 0, 2, 0), 24),    // documentation
    (Ipv4Addr::new(192, 88, 99, 0), 24),  // 6to4 relay anycast
    (Ipv4Addr::new(192, 168, 0, 0), 16),  // private
    (Ipv4Addr::new(198, 18, 0, 0), 15),   // benchmarking
    (Ipv4Addr::new(198, 51, 100, 0), 24), // documentation
    (Ipv4Addr::new(203, 0, 113, 0), 24),  // documentation
    (Ipv4Addr::new(224, 0, 0, 0), 4),     // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4),     // reserved, and the broadcast address
];

/// IPv6 ranges a callback may not reach, besides everything outside global unicast
/// (2000::/3: loopback, unspecified, IPv4-compatible, NAT64, discard-only, unique local,
/// link-local, site-local, multicast). Translated forms are refused whatever they embed:
/// where a NAT64 gateway, 6to4 relay or Teredo server sends a request is theirs to decide,
/// and an IPv4-only target can be listed by address.
const INTERNAL_V6: &[(Ipv6Addr, u8)] = &[
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23), // IETF protocol assignments, Teredo
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32), // documentation
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16), // 6to4
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20), // documentation
];

/// Global unicast IPv6, the only space a callback may reach by name.
const GLOBAL_UNICAST_V6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);

fn in_v4(ip: Ipv4Addr, (network, length): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(length)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(network) & mask
}

fn in_v6(ip: Ipv6Addr, (network, length): (Ipv6Addr, u8)) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(length)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(network) & mask
}

/// Whether a callback to this address could reach something that is not the public
/// internet: this host, the private network, the cloud's metadata service, or a translator
/// that could lead to any of them. An IPv4-mapped address (`::ffff:a.b.c.d`) is judged by
/// the IPv4 address it is.
fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => INTERNAL_V4.iter().any(|range| in_v4(v4, *range)),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal(IpAddr::V4(v4)),
            None => {
                !in_v6(v6, GLOBAL_UNICAST_V6) || INTERNAL_V6.iter().any(|range| in_v6(v6, *range))
            }
        },
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
    fn translated_special_purpose_and_disguised_addresses_are_internal() {
        let internal = [
            // IPv4 special-purpose ranges
            ("0.1.2.3", "this network"),
            ("100.127.255.254", "shared address space (CGNAT)"),
            ("192.0.0.8", "IETF protocol assignments"),
            ("192.0.2.1", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("192.88.99.1", "6to4 relay anycast"),
            ("224.0.0.251", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            // IPv4 inside IPv6
            ("::ffff:10.0.0.1", "IPv4-mapped private"),
            ("::ffff:169.254.169.254", "IPv4-mapped link-local"),
            ("::127.0.0.1", "IPv4-compatible loopback"),
            ("::10.0.0.1", "IPv4-compatible private"),
            ("64:ff9b::7f00:1", "NAT64 of loopback"),
            ("64:ff9b::808:808", "NAT64: the translator decides"),
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("2002:7f00:1::1", "6to4 of loopback"),
            ("2002:808:808::1", "6to4: the relay decides"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            // IPv6 special-purpose ranges
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("100::1", "discard-only"),
            ("2001:2::1", "benchmarking"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("fc00::1", "unique local"),
            ("fdff:ffff::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
        ];
        for (ip, why) in internal {
            assert!(is_internal(ip.parse().unwrap()), "{ip} ({why})");
        }
        for ip in [
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "223.255.255.254",
            "::ffff:8.8.8.8",
            "2001:4860:4860::8888",
            "2a00:1450:4001:81b::200e",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip} is public");
        }
    }

    #[test]
    fn backoffs_follow_their_kind_and_retry_after_stays_within_the_ladder() {
        let policy = TopicPolicy::new(
            vec![Duration::from_secs(15), Duration::from_secs(180)],
            Duration::from_secs(1),
        );
        let secs = Duration::from_secs;
        let fixed = Backoff {
            kind: BackoffKind::Fixed,
            delay_seconds: 7,
            max_delay_seconds: None,
        };
        assert_eq!(policy.delay_after(5, Some(&fixed), None), secs(7));
        let exponential = Backoff {
            kind: BackoffKind::Exponential,
            delay_seconds: 10,
            max_delay_seconds: Some(60),
        };
        for (attempt, full) in [(1, 10), (2, 20), (3, 40), (4, 60), (30, 60)] {
            let delay = policy.delay_after(attempt, Some(&exponential), None);
            assert!(
                delay >= secs(full) / 2 && delay <= secs(full),
                "attempt {attempt}: {delay:?}"
            );
        }
        let ladder = Backoff {
            kind: BackoffKind::Ladder,
            delay_seconds: 30,
            max_delay_seconds: Some(100),
        };
        assert_eq!(policy.delay_after(1, Some(&ladder), None), secs(30));
        assert_eq!(policy.delay_after(2, Some(&ladder), None), secs(100));
        assert_eq!(policy.delay_after(1, None, None), secs(15));
        assert_eq!(policy.delay_after(1, Some(&fixed), Some(secs(1))), secs(15));
        assert_eq!(policy.delay_after(1, None, Some(secs(90))), secs(90));
        assert_eq!(policy.delay_after(1, None, Some(secs(9999))), secs(180));
    }

    #[test]
    fn the_ladder_repeats_its_last_step() {
        let policy = TopicPolicy::new(
            vec![Duration::from_secs(15), Duration::from_secs(180)],
            Duration::from_secs(1),
        );
        assert_eq!(policy.retry_delay(1), Duration::from_secs(15));
        assert_eq!(policy.retry_delay(2), Duration::from_secs(180));
        assert_eq!(policy.retry_delay(9), Duration::from_secs(180));
    }
}
