//! The notifications made by the delay queue (`features::jobs`), so that each is made once
//! across instances, whichever instance runs it:
//! - `ORDER_EXPIRING`: a reminder job per order, scheduled by the order consumer when the
//!   order is created, due five minutes before its pay-by time; it finds the order still
//!   unpaid, or does nothing.
//! - `STREAK_AT_RISK`: one repeating job, every quarter hour of UTC, which tells the users
//!   whose evening (20:00 to 20:15 in their own zone) falls in the quarter hour it runs in
//!   and whose streak is at risk, and prunes what is past retention. Every instance
//!   schedules it at start: its id makes it one job, and the queue schedules each next run
//!   in the step that ends the one before, so runs never overlap and none is lost. The
//!   quarter hour is what zones at :30 and :45 from UTC need; a notice's source (the user
//!   and the user's day) keeps a quarter hour run twice from telling anyone twice.
//!
//! Rejected: a timer in every instance under a lock, which runs the sweep once per holder
//! but leaves a slot whose holder died half done; a job retries until it is done.

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Duration as Span, DurationRound, Timelike, Utc};
use sqlx::Row;

use super::{store::ensure_state, text, Notice, NotificationKind, Notifications, RETENTION_DAYS};
use crate::{
    features::{
        jobs::{handlers::Delivery, repeat::RepeatRule, JobError, JobHandler, NewJob},
        vouchers::{events::OrderEvent, orders::OrderStatus},
    },
    infra::error::{AppResult, ErrorCode},
};

/// The topic of the order reminders.
pub const REMINDER_TOPIC: &str = "notifications.order-expiring";
/// The topic of the evening sweep.
pub const EVENING_TOPIC: &str = "notifications.streak-at-risk";
/// How long before an order's pay-by time its reminder is due.
const REMINDER_AHEAD_MS: i64 = 5 * 60 * 1000;
/// The evening sweep's step.
const SLOT_MINUTES: i64 = 15;
/// The evening sweep's id, and when it runs: each quarter hour of UTC.
const EVENING_JOB: &str = "evening";
const EVENING_CRON: &str = "*/15 * * * *";
/// The local hour a streak at risk is told at.
const EVENING_HOUR: u32 = 20;
/// Sign-ins this recent make a user a candidate of the sweep (a streak at risk today was
/// kept yesterday, in the user's zone, which is within two days of UTC's).
const CANDIDATE_WINDOW_MS: i64 = 3 * 24 * 3600 * 1000;
/// Users pruned per sweep.
const PRUNE_USERS: i64 = 500;
/// How long a source is remembered: a replay comes within minutes (a consumer's batch, a
/// job's retry), and a like's row per liker kept for the notifications' 90 days would be
/// the largest table of the feature for nothing.
const SOURCE_RETENTION_DAYS: i64 = 7;

impl Notifications {
    /// Registers the job handlers, and schedules the evening sweep (once per instance start;
    /// its id makes it one job whichever instance schedules it).
    pub(crate) fn register_jobs(&self) {
        self.jobs
            .register(REMINDER_TOPIC, Arc::new(Reminder(self.clone())), None);
        self.jobs
            .register(EVENING_TOPIC, Arc::new(Evening(self.clone())), None);
        let this = self.clone();
        self.infra
            .instance
            .spawn("notifications-evening", async move {
                // Until it is scheduled: an instance that starts with Redis away tries again.
                loop {
                    match this.schedule_evening().await {
                        Ok(()) => return,
                        Err(error) => {
                            tracing::warn!(%error, "the evening sweep is not scheduled yet");
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        }
                    }
                }
            });
    }

    /// Schedules the order's reminder, unless its pay window is shorter than the notice.
    pub(crate) async fn schedule_reminder(&self, event: &OrderEvent) -> AppResult<()> {
        let order = event.order;
        let due = order.pay_by_ms - REMINDER_AHEAD_MS;
        if due <= order.created_at_ms {
            return Ok(());
        }
        let body = serde_json::json!({
            "order": order.order_id,
            "voucher": order.voucher_id,
            "buyer": event.buyer_id,
        });
        let job = new_job(
            order.order_id.to_string(),
            REMINDER_TOPIC,
            body.to_string(),
            due - self.infra.clock.now_ms(),
        );
        existing_is_fine(self.jobs.schedule(job).await.map(drop))
    }

    pub(crate) async fn voucher_title(&self, voucher_id: i64) -> AppResult<String> {
        Ok(self
            .vouchers
            .find(voucher_id)
            .await?
            .map_or_else(|| "a voucher".to_string(), |voucher| voucher.title))
    }

    async fn remind(&self, order_id: i64, voucher_id: i64, buyer_id: i64) -> AppResult<()> {
        let Some(order) = self.vouchers.find_order(order_id).await? else {
            return Ok(());
        };
        if order.status != OrderStatus::Unpaid || order.buyer_id != buyer_id {
            return Ok(());
        }
        let mut notice = Notice::new(
            format!("expiring:{order_id}"),
            buyer_id,
            NotificationKind::OrderExpiring,
            self.infra.clock.now_ms(),
        );
        notice.order_id = Some(order_id);
        notice.text = Some(text::order_expiring(&self.voucher_title(voucher_id).await?));
        self.record(vec![notice]).await
    }

    /// Schedules the evening sweep, a series without end, unless it is pending already.
    async fn schedule_evening(&self) -> AppResult<()> {
        let mut job = new_job(EVENING_JOB.into(), EVENING_TOPIC, "{}".into(), 0);
        job.repeat = Some(RepeatRule {
            cron: Some(EVENING_CRON.into()),
            time_zone: Some("UTC".into()),
            ..RepeatRule::default()
        });
        existing_is_fine(self.jobs.schedule(job).await.map(drop))
    }

    /// Tells the users whose evening is in the slot now, and whose streak is at risk.
    /// A run late by more than a slot tells the slot it runs in (a slot missed while no
    /// instance ran is not caught up).
    pub(crate) async fn tell_streaks_at_risk(&self) -> AppResult<usize> {
        let now = self.infra.clock.now();
        let slot = slot_of(now);
        let rows = sqlx::query("SELECT DISTINCT user_id FROM sign_ins WHERE signed_at_ms > $1")
            .bind(now.timestamp_millis() - CANDIDATE_WINDOW_MS)
            .fetch_all(&self.infra.db.pool)
            .await?;
        let mut notices = Vec::new();
        for row in rows {
            let user_id: i64 = row.try_get("user_id")?;
            let zone = self.signin.zone_of(user_id, None).await?;
            let local = slot.with_timezone(&zone.zone);
            if local.hour() != EVENING_HOUR || local.minute() >= SLOT_MINUTES as u32 {
                continue;
            }
            let status = self.signin.status(user_id, None).await?;
            if !status.at_risk() || status.current <= 0 {
                continue;
            }
            notices.push({
                let mut notice = Notice::new(
                    format!("at-risk:{user_id}:{}", local.date_naive()),
                    user_id,
                    NotificationKind::StreakAtRisk,
                    now.timestamp_millis(),
                );
                notice.text = Some(text::streak_at_risk(status.current));
                notice
            });
        }
        let told = notices.len();
        self.record(notices).await?;
        Ok(told)
    }

    /// Deletes what is past retention, a few hundred users at a time; each user's count is
    /// recounted under its lock and Redis rewritten from SQL.
    pub(crate) async fn prune(&self) -> AppResult<()> {
        const DAY_MS: i64 = 24 * 3600 * 1000;
        let now = self.infra.clock.now_ms();
        let cutoff = now - RETENTION_DAYS * DAY_MS;
        sqlx::query("DELETE FROM notification_sources WHERE created_at_ms < $1")
            .bind(now - SOURCE_RETENTION_DAYS * DAY_MS)
            .execute(&self.infra.db.pool)
            .await?;
        let users = sqlx::query(
            "SELECT DISTINCT user_id FROM notifications WHERE updated_at_ms < $1 LIMIT $2",
        )
        .bind(cutoff)
        .bind(PRUNE_USERS)
        .fetch_all(&self.infra.db.pool)
        .await?;
        for row in users {
            let user_id: i64 = row.try_get("user_id")?;
            let mut tx = self.infra.db.pool.begin().await?;
            ensure_state(&mut tx, user_id).await?;
            let state = sqlx::query(
                "UPDATE notification_states SET version = version + 1 WHERE user_id = $1 \
                 RETURNING read_seq",
            )
            .bind(user_id)
            .fetch_one(&mut *tx)
            .await?;
            let read_seq: i64 = state.try_get("read_seq")?;
            sqlx::query("DELETE FROM notifications WHERE user_id = $1 AND updated_at_ms < $2")
                .bind(user_id)
                .bind(cutoff)
                .execute(&mut *tx)
                .await?;
            let unread: i64 = sqlx::query(
                "SELECT COUNT(*) AS n FROM notifications WHERE user_id = $1 AND seq > $2",
            )
            .bind(user_id)
            .bind(read_seq)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
            sqlx::query("UPDATE notification_states SET unread = $1 WHERE user_id = $2")
                .bind(unread)
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            self.rebuild_user(user_id).await?;
        }
        Ok(())
    }
}

/// The quarter hour `at` falls in.
fn slot_of(at: DateTime<Utc>) -> DateTime<Utc> {
    at.duration_trunc(Span::minutes(SLOT_MINUTES)).unwrap_or(at)
}

fn new_job(id: String, topic: &str, body: String, delay_ms: i64) -> NewJob {
    NewJob::new(
        id,
        topic,
        body,
        Duration::from_millis(delay_ms.max(0) as u64),
    )
}

/// A job already pending under the id is the one wanted.
fn existing_is_fine(answer: AppResult<()>) -> AppResult<()> {
    match answer {
        Err(error) if error.code() == ErrorCode::JobExists => Ok(()),
        other => other,
    }
}

struct Reminder(Notifications);

#[async_trait::async_trait]
impl JobHandler for Reminder {
    async fn handle(&self, delivery: &Delivery) -> Result<(), JobError> {
        let body: serde_json::Value = serde_json::from_str(&delivery.spec.body)
            .map_err(|e| JobError::Permanent(format!("bad body: {e}")))?;
        let (Some(order), Some(voucher), Some(buyer)) = (
            body["order"].as_i64(),
            body["voucher"].as_i64(),
            body["buyer"].as_i64(),
        ) else {
            return Err(JobError::Permanent(
                "body lacks order, voucher or buyer".into(),
            ));
        };
        self.0
            .remind(order, voucher, buyer)
            .await
            .map_err(|error| JobError::Retry(error.to_string()))
    }
}

struct Evening(Notifications);

#[async_trait::async_trait]
impl JobHandler for Evening {
    async fn handle(&self, _delivery: &Delivery) -> Result<(), JobError> {
        let retry = |error: crate::infra::error::AppError| JobError::Retry(error.to_string());
        // A run that keeps failing retries on its own ladder; the series goes on after it.
        self.0.tell_streaks_at_risk().await.map_err(retry)?;
        self.0.prune().await.map_err(retry)
    }
}
