//! The consumers of the points feature (all on the shared stream consumer):
//! - `points-archive`: every award, spend and revoke into `points_record` (idempotent on the
//!   event id, and once per user and idempotency key);
//! - `points-intake`: awards other services XADD to `{points}:intake` as
//!   `{user, type, points, key}`, idempotent on their key like `awardPoints`;
//! - `like-points`: a second consumer group on the vote streams of the likes feature that
//!   awards `LIKE_RECEIVED` to a remark's author for each new like by someone else, once per
//!   liker and remark.

use std::{collections::BTreeMap, sync::Arc};

use futures::{stream::FuturesOrdered, StreamExt};
use sqlx::{Any, Transaction};

use super::{check_amount, PointsType};
use crate::{
    features::{
        points::{
            events::{AwardEvent, IntakeAward},
            Points,
        },
        remarks::events::{RemarkCreated, VoteEvent},
    },
    infra::{
        clock::day_number,
        db,
        error::{AppError, ErrorCode},
        streams::{self, Event, HandleError, Handler, RedisHandler, StreamEntry, StreamHandler},
    },
};

struct PointsArchive(Points);

/// An award, spend or revoke as `points_record` keeps it.
struct AwardRow {
    award: AwardEvent,
    event_id: String,
    /// The day (`YYYYMMDD`) it counted on.
    date: i64,
    event_order: i64,
}

/// A sign-in, repair or frozen day carried by a SIGN_IN award (its `day`, `made_up` and
/// `frozen` fields).
struct SignInRow {
    user_id: i64,
    day: i64,
    made_up: i64,
    frozen: i64,
    signed_at_ms: i64,
}

/// A streak freeze earned (on the day signed), used (on the day it kept) or bought (on the
/// user's day of the purchase: `BOUGHT <key>`, a row per purchase).
struct FreezeRow {
    user_id: i64,
    day: i64,
    reason: String,
    delta: i64,
    at_ms: i64,
}

#[async_trait::async_trait]
impl StreamHandler for PointsArchive {
    /// Awards, spends and revokes go to `points_record` once per event and once per (user,
    /// idempotency key): a repeat whose Redis marker had expired is not archived a second
    /// time. Sign-ins go to `sign_ins` once per user and day, with the freezes earned and
    /// used (`streak_freezes`, once per user, day and reason), and the zone a first sign-in
    /// recorded to `sign_in_zones`.
    async fn handle(
        &self,
        tx: &mut Transaction<'static, Any>,
        entries: &[StreamEntry],
    ) -> Result<(), HandleError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut awards = Vec::with_capacity(entries.len());
        let mut sign_ins = Vec::new();
        let mut freezes = Vec::new();
        let mut zones = Vec::new();
        for entry in entries {
            let mut award = AwardEvent::from_entry(entry)?;
            // The day whose cap counted it (the user's), else the server's day of it.
            let date = award
                .date
                .unwrap_or_else(|| day_number(self.0.infra.clock.date_of_ms(award.at_ms)));
            if let Some(day) = award.freeze_bought_on {
                freezes.push(FreezeRow {
                    user_id: award.user_id,
                    day,
                    reason: format!("BOUGHT {}", award.idempotency_key),
                    delta: 1,
                    at_ms: award.at_ms,
                });
            }
            if let Some(signed) = award.sign_in.take() {
                if let Some(first) = signed.first_zone {
                    zones.push((award.user_id, first));
                }
                sign_ins.push(SignInRow {
                    user_id: award.user_id,
                    day: signed.day,
                    made_up: i64::from(signed.made_up),
                    frozen: 0,
                    signed_at_ms: award.at_ms,
                });
                for &day in &signed.frozen {
                    sign_ins.push(SignInRow {
                        user_id: award.user_id,
                        day,
                        made_up: 0,
                        frozen: 1,
                        signed_at_ms: award.at_ms,
                    });
                    freezes.push(FreezeRow {
                        user_id: award.user_id,
                        day,
                        reason: "USED".into(),
                        delta: -1,
                        at_ms: award.at_ms,
                    });
                }
                if signed.freezes_earned > 0 {
                    freezes.push(FreezeRow {
                        user_id: award.user_id,
                        day: signed.day,
                        reason: "EARNED".into(),
                        delta: signed.freezes_earned,
                        at_ms: award.at_ms,
                    });
                }
            }
            awards.push(AwardRow {
                event_id: self.0.infra.keys.points_event_id(award.user_id, &entry.id),
                date,
                event_order: entry.event_order(),
                award,
            });
        }
        db::insert_new_rows(
            tx,
            "points_record (event_id, user_id, kind, points, requested, idempotency_key, \
             season, awarded_at_ms, award_date, event_order, reason)",
            11,
            &awards,
            |insert, row| {
                insert
                    .bind(&row.event_id)
                    .bind(row.award.user_id)
                    .bind(row.award.kind_text())
                    .bind(row.award.points)
                    .bind(row.award.requested)
                    .bind(&row.award.idempotency_key)
                    .bind(row.award.season)
                    .bind(row.award.at_ms)
                    .bind(row.date)
                    .bind(row.event_order)
                    .bind(&row.award.reason)
            },
        )
        .await?;
        db::insert_new_rows(
            tx,
            "sign_ins (user_id, day, made_up, frozen, signed_at_ms)",
            5,
            &sign_ins,
            |insert, row| {
                insert
                    .bind(row.user_id)
                    .bind(row.day)
                    .bind(row.made_up)
                    .bind(row.frozen)
                    .bind(row.signed_at_ms)
            },
        )
        .await?;
        db::insert_new_rows(
            tx,
            "streak_freezes (user_id, day, reason, delta, at_ms)",
            5,
            &freezes,
            |insert, row| {
                insert
                    .bind(row.user_id)
                    .bind(row.day)
                    .bind(&row.reason)
                    .bind(row.delta)
                    .bind(row.at_ms)
            },
        )
        .await?;
        // A replayed event's row is there already (same user and instant): skipped. A change
        // made since is a later row, and the latest row is the user's zone.
        db::insert_new_rows(
            tx,
            "sign_in_zones (user_id, zone, previous_zone, from_day, changed_on, changed_at_ms)",
            6,
            &zones,
            |insert, (user_id, first)| {
                insert
                    .bind(*user_id)
                    .bind(&first.zone)
                    .bind(&first.previous)
                    .bind(first.from_day)
                    .bind(None::<i64>)
                    .bind(first.changed_ms)
            },
        )
        .await?;
        Ok(())
    }
}

/// An award error as the stream consumer sees it: bad input is the entry's fault, an
/// unavailable Redis is not.
fn award_failure(entry: &StreamEntry, error: AppError) -> HandleError {
    match error.code() {
        ErrorCode::BadUserInput => HandleError::Poison(format!("entry {}: {error}", entry.id)),
        _ => HandleError::Unavailable(error.to_string()),
    }
}

/// An award a consumer asks for on behalf of one of its entries.
struct Claim<'a> {
    entry: &'a StreamEntry,
    user_id: i64,
    kind: PointsType,
    points: i64,
    key: String,
    /// Whether the key may have been paid before. Past the week of its Redis marker only SQL
    /// knows, so each such award asks it; one known to be new does not.
    paid_before: bool,
}

impl<'a> Claim<'a> {
    fn new(
        entry: &'a StreamEntry,
        user_id: i64,
        kind: PointsType,
        points: i64,
        key: String,
    ) -> Self {
        Self {
            entry,
            user_id,
            kind,
            points,
            key,
            paid_before: true,
        }
    }
}

struct PointsIntake(Points);

#[async_trait::async_trait]
impl RedisHandler for PointsIntake {
    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let mut awards = Vec::with_capacity(entries.len());
        for entry in entries {
            let asked = IntakeAward::from_entry(entry)?;
            let key = super::service_key(&asked.key).map_err(|e| award_failure(entry, e))?;
            awards.push(Claim::new(
                entry,
                asked.user_id,
                asked.kind,
                asked.points,
                key,
            ));
        }
        self.0.award_all(awards).await
    }
}

struct LikePoints(Points);

#[async_trait::async_trait]
impl RedisHandler for LikePoints {
    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let points = self.0.rules.rule(PointsType::LikeReceived).points;
        let mut awards = Vec::with_capacity(entries.len());
        for entry in entries {
            let vote = VoteEvent::from_entry(entry)?;
            if !vote.liked || vote.voter_id == vote.author_id {
                continue; // unlikes take nothing back; liking oneself earns nothing
            }
            let key = format!("like:{}:{}", vote.remark_id, vote.voter_id);
            let claim = Claim::new(entry, vote.author_id, PointsType::LikeReceived, points, key);
            // A liker's first vote on the remark: no award under its key can exist, in Redis
            // or in SQL, so SQL need not be asked (most likes are first ones).
            awards.push(Claim {
                paid_before: !vote.first_vote,
                ..claim
            });
        }
        self.0.award_all(awards).await
    }
}

struct RemarkPoints(Points);

#[async_trait::async_trait]
impl RedisHandler for RemarkPoints {
    async fn handle(&self, entries: &[StreamEntry]) -> Result<(), HandleError> {
        let points = self.0.rules.rule(PointsType::Remark).points;
        let mut awards = Vec::with_capacity(entries.len());
        for entry in entries {
            let remark = RemarkCreated::from_entry(entry)?;
            let key = format!("remark:{}", remark.remark_id);
            awards.push(Claim::new(
                entry,
                remark.author_id,
                PointsType::Remark,
                points,
                key,
            ));
        }
        self.0.award_all(awards).await
    }
}

/// Awards per script call: a call runs inside Redis without a break, so a batch of a
/// thousand is cut into calls of a few milliseconds each.
const AWARDS_PER_CALL: usize = 100;
/// Script calls in flight at once while a batch is handled.
const CALLS_IN_FLIGHT: usize = 4;

impl Points {
    /// Runs the points consumers: the award archive, the intake of awards made elsewhere, the
    /// points for likes received, read from the vote streams (`vote_streams`), and the points
    /// for writing a remark, read from the remark stream (`remark_stream`).
    ///
    /// Points react to other features' events rather than being called by them: a remark is
    /// stored whether or not its points can be paid at that moment, and the consumer pays them
    /// once Redis answers (an award is idempotent on its key, so a replay pays nothing twice).
    pub(crate) fn spawn_archive(&self, vote_streams: Vec<String>, remark_stream: String) {
        streams::spawn(
            &self.infra,
            "points-archive",
            "archive",
            self.infra.keys.points_streams(),
            Handler::Archive(Arc::new(PointsArchive(self.clone()))),
        );
        streams::spawn(
            &self.infra,
            "points-intake",
            "intake",
            vec![self.infra.keys.points_intake_stream()],
            Handler::Redis(Arc::new(PointsIntake(self.clone()))),
        );
        streams::spawn(
            &self.infra,
            "like-points",
            "points",
            vote_streams,
            Handler::Redis(Arc::new(LikePoints(self.clone()))),
        );
        streams::spawn(
            &self.infra,
            "remark-points",
            "points",
            vec![remark_stream],
            Handler::Redis(Arc::new(RemarkPoints(self.clone()))),
        );
    }

    /// Pays a batch's awards a hundred to a script call (`points_award.lua`), grouped by
    /// their bucket, in entry order within it. One call per award made every like cost a second
    /// script round trip and a consumer one round trip per award behind a backlog. Awards are
    /// idempotent on their key, so a batch that fails part-way is simply handled again.
    async fn award_all(&self, awards: Vec<Claim<'_>>) -> Result<(), HandleError> {
        let asked: Vec<(i64, &str)> = awards
            .iter()
            .filter(|claim| claim.paid_before)
            .map(|claim| (claim.user_id, claim.key.as_str()))
            .collect();
        let archived = self.archived_awards(&asked).await;
        let mut buckets: BTreeMap<u32, Vec<(i64, PointsType, i64, &str)>> = BTreeMap::new();
        for claim in &awards {
            if claim.paid_before && archived.contains_key(&(claim.user_id, claim.key.clone())) {
                continue;
            }
            check_amount(claim.points).map_err(|e| award_failure(claim.entry, e))?;
            buckets
                .entry(self.infra.keys.points_bucket(claim.user_id))
                .or_default()
                .push((claim.user_id, claim.kind, claim.points, claim.key.as_str()));
        }
        let mut calls = buckets
            .values()
            .flat_map(|bucket| bucket.chunks(AWARDS_PER_CALL));
        let mut in_flight = FuturesOrdered::new();
        loop {
            while in_flight.len() < CALLS_IN_FLIGHT {
                let Some(chunk) = calls.next() else { break };
                in_flight.push_back(self.award_unarchived(chunk));
            }
            match in_flight.next().await {
                Some(result) => result.map_err(|e| HandleError::Unavailable(e.to_string()))?,
                None => return Ok(()),
            };
        }
    }
}
