//! GraphQL types of points.

use async_graphql::{ComplexObject, Context, Object, SimpleObject};

use super::{
    scalars::DateTime,
    users::{load_user, User},
    ContextExt,
};
use crate::{
    features::points::{
        balance::Balance, AwardOutcome, Points, PointsRecord, PointsType, TodayByType,
    },
    infra::error::AppResult,
};

#[derive(SimpleObject)]
pub(crate) struct PointsByType {
    #[graphql(name = "type")]
    pub(crate) kind: PointsType,
    pub(crate) points: i64,
    /// Null: uncapped.
    pub(crate) cap: Option<i64>,
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

/// What an award answers, with the user it paid and their total of the type today.
#[derive(SimpleObject)]
#[graphql(complex)]
pub(crate) struct AwardResult {
    #[graphql(skip)]
    pub(crate) user_id: i64,
    #[graphql(skip)]
    pub(crate) kind: PointsType,
    pub(crate) awarded: i64,
    /// Fewer points than asked were given because of the daily cap.
    pub(crate) capped: bool,
    /// The idempotency key was seen before; nothing more was given.
    pub(crate) duplicate: bool,
}

impl AwardResult {
    pub(crate) fn new(user_id: i64, kind: PointsType, outcome: AwardOutcome) -> Self {
        Self {
            user_id,
            kind,
            awarded: outcome.awarded,
            capped: outcome.capped,
            duplicate: outcome.duplicate,
        }
    }
}

#[ComplexObject]
impl AwardResult {
    /// The user awarded.
    async fn user(&self, ctx: &Context<'_>) -> AppResult<User> {
        load_user(ctx, self.user_id).await
    }

    /// The user's points of the awarded type today, after the award, with its cap.
    async fn today(&self, ctx: &Context<'_>) -> AppResult<PointsByType> {
        Ok(ctx
            .feature::<Points>()
            .today_of(self.user_id, self.kind)
            .await?
            .into())
    }
}

pub(crate) struct PointsEntry(pub PointsRecord);

/// An award (positive points), a spend or a revoke (negative points).
#[Object(name = "PointsRecord")]
impl PointsEntry {
    /// The award's type; a revoke's is the revoked award's; null for a spend.
    #[graphql(name = "type")]
    async fn kind(&self) -> Option<PointsType> {
        self.0.kind
    }

    /// Negative for a spend or a revoke.
    async fn points(&self) -> i64 {
        self.0.points
    }

    /// Why points were spent or revoked; null for an award.
    async fn reason(&self) -> Option<&str> {
        self.0.reason.as_deref()
    }

    /// Where the points came from or went: the namespace of the record's idempotency key
    /// (`signin`, `makeup`, `remark`, `like`, `service` for `awardPoints`, `reward`, `spend`
    /// for `spendPoints`, `revoke` for `revokeAward`, …).
    async fn source(&self) -> Option<&str> {
        self.0.source()
    }

    /// The season (`YYYYMM`) the points counted for.
    async fn season_id(&self) -> String {
        self.0.season.to_string()
    }

    async fn awarded_at(&self) -> DateTime {
        DateTime::from_ms(self.0.awarded_at_ms)
    }
}

pub(crate) struct PointsBalance(pub Balance);

/// A user's points as currency: what they earned, spent and had revoked, and what is left.
#[Object]
impl PointsBalance {
    /// Every point awarded, revoked ones included.
    async fn earned(&self) -> i64 {
        self.0.earned
    }

    async fn spent(&self) -> i64 {
        self.0.spent
    }

    /// Points of awards revoked.
    async fn revoked(&self) -> i64 {
        self.0.revoked
    }

    /// `earned - spent - revoked`: what can be spent. Below zero only by what was revoked
    /// after it was spent.
    async fn balance(&self) -> i64 {
        self.0.balance()
    }
}
