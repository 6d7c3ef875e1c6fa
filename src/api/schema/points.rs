//! GraphQL types of points.

use async_graphql::{Object, SimpleObject};

use super::scalars::DateTime;
use crate::features::points::{AwardOutcome, PointsRecord, PointsType, TodayByType};

#[derive(SimpleObject)]
pub struct PointsByType {
    #[graphql(name = "type")]
    pub kind: PointsType,
    pub points: i64,
    /// Null: uncapped.
    pub cap: Option<i64>,
}

impl From<TodayByType> for PointsByType {
    fn from(today: TodayByType) -> Self {
        Self {
            kind: today.kind,
            points: today.points,
            cap: today.cap,
        }
    }
}

#[derive(SimpleObject)]
pub struct AwardResult {
    pub awarded: i64,
    /// Fewer points than asked were given because of the daily cap.
    pub capped: bool,
    /// The idempotency key was seen before; nothing more was given.
    pub duplicate: bool,
}

impl From<AwardOutcome> for AwardResult {
    fn from(outcome: AwardOutcome) -> Self {
        Self {
            awarded: outcome.awarded,
            capped: outcome.capped,
            duplicate: outcome.duplicate,
        }
    }
}

pub struct PointsEntry(pub PointsRecord);

#[Object(name = "PointsRecord")]
impl PointsEntry {
    #[graphql(name = "type")]
    async fn kind(&self) -> PointsType {
        self.0.kind
    }

    async fn points(&self) -> i64 {
        self.0.points
    }

    /// The season (`YYYYMM`) the points counted for.
    async fn season_id(&self) -> String {
        self.0.season.to_string()
    }

    async fn awarded_at(&self) -> DateTime {
        DateTime::from_ms(self.0.awarded_at_ms)
    }
}
