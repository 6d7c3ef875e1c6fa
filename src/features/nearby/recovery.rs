//! The GEO set of items, from `items` (the rows with a location).
//!
//! An item whose placement waits in `item_placements` (Redis refused it at creation) is
//! drift in flight to `verify`; its delivery and a rebuild both GEOADD the position SQL
//! holds, in either order.

use sqlx::Row;

use crate::{
    features::nearby::Nearby,
    infra::{
        error::AppResult,
        recovery::{Rebuild, Report},
    },
};

/// Items read and written per round trip.
const CHUNK: i64 = 1000;

/// GEO positions are stored as 52-bit geohashes: about 0.6 mm, far inside this.
const TOLERANCE_DEGREES: f64 = 1e-5;

impl Nearby {
    /// Placed items (id, lng, lat) with ids above `after`, one chunk.
    async fn placed(&self, after: i64) -> AppResult<Vec<(i64, f64, f64)>> {
        let rows = sqlx::query(
            "SELECT id, lng, lat FROM items WHERE id > $1 AND lat IS NOT NULL AND lng IS NOT NULL \
             ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(CHUNK)
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            items.push((row.try_get("id")?, row.try_get("lng")?, row.try_get("lat")?));
        }
        Ok(items)
    }

    /// Every placed item is in the set where SQL puts it, and the set holds nothing else.
    pub async fn verify(&self) -> AppResult<Report> {
        let mut report = Report::new("items near me");
        let key = self.infra.keys.item_locations();
        let mut after = 0;
        let mut placed_count = 0u64;
        loop {
            let items = self.placed(after).await?;
            let Some(&(last, _, _)) = items.last() else {
                break;
            };
            let mut conn = self.infra.redis.get().await?;
            let positions: Vec<Option<(f64, f64)>> = redis::cmd("GEOPOS")
                .arg(&key)
                .arg(items.iter().map(|(id, _, _)| *id).collect::<Vec<_>>())
                .query_async(&mut *conn)
                .await?;
            drop(conn);
            for (&(id, lng, lat), position) in items.iter().zip(positions) {
                report.check(
                    position.is_some_and(|(x, y)| {
                        (x - lng).abs() < TOLERANCE_DEGREES && (y - lat).abs() < TOLERANCE_DEGREES
                    }),
                    || format!("item {id}: SQL has ({lat}, {lng}), Redis {position:?}"),
                );
            }
            placed_count += items.len() as u64;
            after = last;
        }
        let mut conn = self.infra.redis.get().await?;
        let in_redis: u64 = redis::cmd("ZCARD")
            .arg(&key)
            .query_async(&mut *conn)
            .await?;
        report.check(in_redis == placed_count, || {
            format!("the set holds {in_redis} items, SQL places {placed_count}")
        });
        Ok(report)
    }

    /// GEOADDs every placed item, a chunk a round trip. Adding is idempotent, and a concurrent
    /// `createItem` adds the same position, so nothing is held back.
    pub(crate) async fn rebuild(&self, run: &Rebuild<'_>) -> AppResult<()> {
        run.expect_count(
            "SELECT COUNT(*) AS n FROM items WHERE lat IS NOT NULL AND lng IS NOT NULL",
        )
        .await?;
        let key = self.infra.keys.item_locations();
        let mut after = run.resume_from().await?;
        loop {
            let items = self.placed(after).await?;
            let Some(&(last, _, _)) = items.last() else {
                return Ok(());
            };
            let mut add = redis::cmd("GEOADD");
            add.arg(&key);
            for (id, lng, lat) in &items {
                add.arg(lng).arg(lat).arg(id);
            }
            let mut conn = self.infra.redis.get().await?;
            let _: i64 = add.query_async(&mut *conn).await?;
            drop(conn);
            run.finished_through(last, items.len() as u64).await?;
            after = last;
        }
    }
}
