//! Per-IP and per-user request rate limits (GCRA, through `governor`), and the per-IP budget
//! of persisted-query registrations.
//!
//! A request is charged what its document costs (`document::Parsed::cost`: 1 for the
//! operations clients send every second, more for long documents and many selections), its
//! writes and its registration, so an address spends its allowance in proportion to the
//! CPU it makes the instance spend, not per request. Registrations are charged again in
//! bytes against a budget of their own per IP, so that one address cannot churn the shared
//! store of persisted queries: past it a query runs but is not stored.
//!
//! The limits are kept in each instance's memory: a check costs no round trip, and behind a
//! load balancer that spreads clients over N instances a client gets at most N times the
//! configured rate. A Redis-based limiter would make the bound exact at the price of one
//! Redis call per request; the per-instance bound is what protects each instance.
//!
//! The probes that cost a read (`/readyz` asks Redis and SQL, `/metrics` renders every
//! family) have an allowance of their own per IP ([`RateLimits::check_probe`]), apart from
//! the GraphQL one: behind a load balancer without `ENGAGE_TRUST_PROXY`, every client
//! shares the balancer's address, and GraphQL traffic spending that address's allowance
//! must not make its readiness checks fail and take the instance out of rotation.

use std::{net::IpAddr, num::NonZeroU32, sync::Arc, time::Duration};

use governor::{clock::Clock, clock::DefaultClock, DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::{api::http::Gateway, infra::error::AppError};

pub(crate) struct RateLimits {
    per_ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_user: Option<DefaultKeyedRateLimiter<i64>>,
    probes_per_ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
    registered_per_ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
}

impl RateLimits {
    /// Rates are sustained requests per second, with bursts of twice that; 0 disables.
    pub(crate) fn new(per_ip: u32, per_user: u32) -> Self {
        Self {
            per_ip: limiter(per_ip),
            per_user: limiter(per_user),
            probes_per_ip: None,
            registered_per_ip: None,
        }
    }

    /// With `per_second` probes (`/readyz`, `/metrics`) allowed per client IP, bursts of
    /// twice that; 0 disables.
    pub(crate) fn with_probes(mut self, per_second: u32) -> Self {
        self.probes_per_ip = limiter(per_second);
        self
    }

    /// A `/readyz` or `/metrics` request from a client IP.
    pub(crate) fn check_probe(&self, ip: IpAddr) -> Result<(), AppError> {
        check_n(self.probes_per_ip.as_ref(), &ip, 1)
    }

    /// With a budget of persisted-query bytes one IP may register per minute (bursts of
    /// twice that; 0 disables).
    pub(crate) fn with_registrations(mut self, bytes_per_minute: u32) -> Self {
        self.registered_per_ip = NonZeroU32::new(bytes_per_minute).map(|rate| {
            let burst = NonZeroU32::new(rate.get().saturating_mul(2)).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst))
        });
        self
    }

    /// Whether an IP may register `bytes` more of persisted queries now (and if so, takes
    /// them from its budget).
    pub(crate) fn may_register(&self, ip: IpAddr, bytes: usize) -> bool {
        let Some(limiter) = &self.registered_per_ip else {
            return true;
        };
        let bytes = NonZeroU32::new(u32::try_from(bytes).unwrap_or(u32::MAX).max(1))
            .unwrap_or(NonZeroU32::MIN);
        matches!(limiter.check_key_n(&ip, bytes), Ok(Ok(())))
    }

    pub(crate) fn check_ip(&self, ip: IpAddr) -> Result<(), AppError> {
        check_n(self.per_ip.as_ref(), &ip, 1)
    }

    pub(crate) fn check_user(&self, user_id: i64) -> Result<(), AppError> {
        check_n(self.per_user.as_ref(), &user_id, 1)
    }

    /// Takes `cost` requests at once from a client IP's allowance (a request that writes
    /// many times pays for each write).
    pub(crate) fn charge_ip(&self, ip: IpAddr, cost: u32) -> Result<(), AppError> {
        check_n(self.per_ip.as_ref(), &ip, cost)
    }

    pub(crate) fn charge_user(&self, user_id: i64, cost: u32) -> Result<(), AppError> {
        check_n(self.per_user.as_ref(), &user_id, cost)
    }

    fn forget_idle(&self) {
        if let Some(limiter) = &self.per_ip {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        if let Some(limiter) = &self.per_user {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        for limiter in [&self.probes_per_ip, &self.registered_per_ip]
            .into_iter()
            .flatten()
        {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

fn limiter<K: std::hash::Hash + Eq + Clone>(per_second: u32) -> Option<DefaultKeyedRateLimiter<K>> {
    let rate = NonZeroU32::new(per_second)?;
    let burst = NonZeroU32::new(per_second.saturating_mul(2)).unwrap_or(rate);
    Some(RateLimiter::keyed(
        Quota::per_second(rate).allow_burst(burst),
    ))
}

fn check_n<K: std::hash::Hash + Eq + Clone>(
    limiter: Option<&DefaultKeyedRateLimiter<K>>,
    key: &K,
    cost: u32,
) -> Result<(), AppError> {
    let (Some(limiter), Some(cost)) = (limiter, NonZeroU32::new(cost)) else {
        return Ok(());
    };
    match limiter.check_key_n(key, cost) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(not_until)) => {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            Err(AppError::RateLimited {
                retry_after_secs: wait.as_secs() + 1,
            })
        }
        // More than a whole burst: no amount of waiting lets this request through.
        Err(_) => Err(AppError::client(
            crate::infra::error::ErrorCode::RateLimited,
            format!("the request costs {cost} requests, more than the rate allows at once"),
        )),
    }
}

/// Drops the state of clients that have been quiet, so memory follows active clients only.
pub(crate) async fn sweep(gateway: Arc<Gateway>) {
    let mut every_minute = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            () = gateway.infra.instance.shutdown.cancelled() => return,
            _ = every_minute.tick() => gateway.rate_limits.forget_idle(),
        }
    }
}
