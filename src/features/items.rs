//! Items: the things remarks, vouchers and nearby search are about (products, shops,
//! courses). Admins create them.
//!
//! An item with a location is placed on the map of "near me" through an outbox
//! (`item_placements`, emptied as `infra::outbox` says): its row and its placement to come
//! are written in one transaction, and the request places it, or leaves that to the retrier
//! when Redis refuses. The request is acknowledged either way: an error once the item is
//! stored would make the admin create it again, a second item, while the first stayed off
//! the map. (An idempotency key on `createItem` was the alternative: it mends only the
//! retries that come, and an item whose creator gave up would still never be placed.)

use sqlx::{any::AnyRow, Row};

use crate::{
    features::nearby::{Location, Nearby},
    infra::{
        error::{AppError, AppResult},
        outbox::{self, Outbox},
        Infra,
    },
};

/// What the item catalogue works with: an item with a location is placed for search.
#[derive(Clone)]
pub struct Items {
    pub(crate) infra: Infra,
    pub(crate) nearby: Nearby,
}

#[derive(Debug, Clone)]
pub struct ItemRecord {
    pub id: i64,
    pub(crate) name: String,
    pub(crate) location: Option<Location>,
    pub(crate) created_at_ms: i64,
}

pub struct NewItem {
    pub(crate) name: String,
    pub(crate) location: Option<Location>,
}

pub(crate) const MAX_NAME_CHARS: usize = 200;

impl NewItem {
    pub fn new(name: &str, lat: Option<f64>, lng: Option<f64>) -> AppResult<Self> {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
            return Err(AppError::bad_input(format!(
                "name must have 1 to {MAX_NAME_CHARS} characters"
            )));
        }
        // PostgreSQL text cannot hold NUL; refused here rather than failing in the INSERT.
        if name.contains('\0') {
            return Err(AppError::bad_input("name must not contain NUL characters"));
        }
        Ok(Self {
            name: name.to_string(),
            location: Location::from_parts(lat, lng)?,
        })
    }
}

impl Items {
    /// Stores an item, and places it on the map when it has a location (the retrier does,
    /// when Redis refuses).
    pub async fn create(&self, created_by: i64, item: NewItem) -> AppResult<ItemRecord> {
        let id = self.infra.ids.next_id().await?;
        let now_ms = self.infra.clock.now_ms();
        let mut tx = self.infra.db.pool.begin().await?;
        // One statement with a location and one without, rather than binding an absent
        // location as NULL: through sqlx's `Any` driver a NULL `f64` goes to PostgreSQL as
        // a NULL `real`, so the statement a connection prepares for an item without a
        // location takes 4-byte parameters there, and the next item with one on that
        // connection failed ("incorrect binary data format in bind parameter 3").
        let insert = match item.location {
            Some(location) => sqlx::query(
                "INSERT INTO items (id, name, lat, lng, created_by, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(id)
            .bind(&item.name)
            .bind(location.lat)
            .bind(location.lng),
            None => sqlx::query(
                "INSERT INTO items (id, name, lat, lng, created_by, created_at_ms) \
                 VALUES ($1, $2, NULL, NULL, $3, $4)",
            )
            .bind(id)
            .bind(&item.name),
        };
        insert
            .bind(created_by)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
        if item.location.is_some() {
            sqlx::query("INSERT INTO item_placements (item_id, created_at_ms) VALUES ($1, $2)")
                .bind(id)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if item.location.is_some() {
            outbox::deliver_or_leave(&self.placements(), &[id]).await;
        }
        Ok(ItemRecord {
            id,
            name: item.name,
            location: item.location,
            created_at_ms: now_ms,
        })
    }

    /// The outbox of placements on the map.
    pub(crate) fn placements(&self) -> Placements {
        Placements(self.clone())
    }

    pub(crate) async fn find(&self, id: i64) -> AppResult<Option<ItemRecord>> {
        Ok(self.find_many(&[id]).await?.pop())
    }

    /// A page of items, newest first.
    pub(crate) async fn page(
        &self,
        page: crate::infra::page::PageArgs<crate::infra::page::KeyRange>,
    ) -> AppResult<(Vec<ItemRecord>, bool)> {
        let sql = format!(
            "SELECT id, name, lat, lng, created_at_ms FROM items WHERE {}",
            page.after.sql_tail("id", 1)
        );
        self.infra
            .db
            .keyset_page(sqlx::query(&sql), page, item_of)
            .await
    }

    /// The item with the most activity: its remarks (neither deleted nor hidden) and the
    /// likes they hold as SQL's archive counts them; ties to the newest item. `None` before
    /// any remark. (What the dashboard shows when it is not told which item: a wall screen
    /// should open on something alive, not on an id that may not exist.)
    pub(crate) async fn most_active(&self) -> AppResult<Option<ItemRecord>> {
        let row = sqlx::query(
            "SELECT item_id, COUNT(*) + CAST(SUM(like_count) AS BIGINT) AS activity FROM remarks \
             WHERE deleted_at_ms IS NULL AND hidden_at_ms IS NULL \
             GROUP BY item_id ORDER BY activity DESC, item_id DESC LIMIT 1",
        )
        .fetch_optional(&self.infra.db.pool)
        .await?;
        match row {
            Some(row) => self.find(row.try_get("item_id")?).await,
            None => Ok(None),
        }
    }

    /// Items by id (in no particular order).
    pub(crate) async fn find_many(&self, ids: &[i64]) -> AppResult<Vec<ItemRecord>> {
        let select = "SELECT id, name, lat, lng, created_at_ms FROM items";
        self.infra.db.find_by_ids(select, ids, item_of).await
    }
}

fn item_of(row: &sqlx::any::AnyRow) -> Result<ItemRecord, sqlx::Error> {
    let lat: Option<f64> = row.try_get("lat")?;
    let lng: Option<f64> = row.try_get("lng")?;
    Ok(ItemRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        location: lat.zip(lng).map(|(lat, lng)| Location { lat, lng }),
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

/// The outbox of items to place on the map: item ids.
#[derive(Clone)]
pub(crate) struct Placements(pub Items);

#[async_trait::async_trait]
impl Outbox for Placements {
    type Entry = i64;
    const NAME: &'static str = "item-placer";
    const TABLE: &'static str = "item_placements";
    const ID: &'static str = "item_id";
    const COLUMNS: &'static str = "item_id";

    fn infra(&self) -> &Infra {
        &self.0.infra
    }

    fn entry_of(row: &AnyRow) -> Result<i64, sqlx::Error> {
        row.try_get("item_id")
    }

    fn id_of(item_id: &i64) -> i64 {
        *item_id
    }

    /// Places the items where SQL has them (GEOADD: placing twice is placing once).
    async fn deliver(&self, item_ids: &[i64]) -> AppResult<()> {
        let items = self.0.find_many(item_ids).await?;
        let placed: Vec<(i64, Location)> = items
            .iter()
            .filter_map(|item| item.location.map(|location| (item.id, location)))
            .collect();
        self.0.nearby.place(&placed).await
    }
}

/// An item's rating summary: how many listed remarks give it 1 to 5 stars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ratings {
    pub histogram: [i64; 5],
}

impl Ratings {
    pub fn count(&self) -> i64 {
        self.histogram.iter().sum()
    }

    /// The mean score; none without ratings.
    pub fn average(&self) -> Option<f64> {
        let count = self.count();
        (count > 0).then(|| {
            let total: i64 = (1..=5)
                .zip(self.histogram)
                .map(|(stars, n)| stars * n)
                .sum();
            total as f64 / count as f64
        })
    }
}

/// The summary columns, in star order.
const STARS: &str = "stars_1, stars_2, stars_3, stars_4, stars_5";

fn ratings_of(row: &AnyRow) -> Result<Ratings, sqlx::Error> {
    let mut histogram = [0; 5];
    for (stars, n) in histogram.iter_mut().enumerate() {
        *n = row.try_get(format!("stars_{}", stars + 1).as_str())?;
    }
    Ok(Ratings { histogram })
}

/// Moves an item's count of `score`-star ratings by `delta`, in the caller's transaction
/// (the remark's own write), so that the summary never differs from the remarks it counts.
/// Rejected: a counter in Redis, which could not commit with the remark's row.
pub(crate) async fn count_rating(
    conn: &mut sqlx::AnyConnection,
    item_id: i64,
    score: i32,
    delta: i64,
) -> Result<(), sqlx::Error> {
    if !(1..=5).contains(&score) {
        return Ok(());
    }
    let column = format!("stars_{score}");
    sqlx::query(&format!(
        "INSERT INTO item_ratings (item_id, {column}) VALUES ($1, $2) \
         ON CONFLICT (item_id) DO UPDATE SET {column} = item_ratings.{column} + excluded.{column}"
    ))
    .bind(item_id)
    .bind(delta)
    .execute(conn)
    .await?;
    Ok(())
}

/// The summary SQL holds, computed from the listed remarks themselves.
const COUNTED: &str = "SELECT item_id, \
    SUM(CASE WHEN score = 1 THEN 1 ELSE 0 END) AS stars_1, \
    SUM(CASE WHEN score = 2 THEN 1 ELSE 0 END) AS stars_2, \
    SUM(CASE WHEN score = 3 THEN 1 ELSE 0 END) AS stars_3, \
    SUM(CASE WHEN score = 4 THEN 1 ELSE 0 END) AS stars_4, \
    SUM(CASE WHEN score = 5 THEN 1 ELSE 0 END) AS stars_5 \
    FROM remarks WHERE deleted_at_ms IS NULL AND hidden_at_ms IS NULL";

impl Items {
    /// The rating summaries of `ids` (an item without one has none).
    pub(crate) async fn ratings(
        &self,
        ids: &[i64],
    ) -> AppResult<std::collections::HashMap<i64, Ratings>> {
        // Named `id` in a subquery, as `find_by_ids` filters on `id` (PostgreSQL does not
        // let a WHERE clause name an alias of its own SELECT).
        let select = format!("SELECT * FROM (SELECT item_id AS id, {STARS} FROM item_ratings) r");
        let rows = self
            .infra
            .db
            .find_by_ids(&select, ids, |row| {
                Ok((row.try_get("id")?, ratings_of(row)?))
            })
            .await?;
        Ok(rows.into_iter().collect())
    }

    /// Each item's summary as its remarks count it: `(item, kept, counted)`.
    async fn rating_pairs(&self, after: i64) -> AppResult<Vec<(i64, Ratings, Ratings)>> {
        let items = crate::infra::recovery::next_ids(
            &self.infra,
            "items",
            "id",
            "TRUE",
            after,
            RATING_CHUNK,
        )
        .await?;
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let kept = self.ratings(&items).await?;
        let rows = sqlx::query(&format!(
            "{COUNTED} AND item_id IN ({}) GROUP BY item_id",
            crate::infra::db::id_list(&items)
        ))
        .fetch_all(&self.infra.db.pool)
        .await?;
        let mut counted = std::collections::HashMap::new();
        for row in &rows {
            counted.insert(row.try_get::<i64, _>("item_id")?, ratings_of(row)?);
        }
        Ok(items
            .iter()
            .map(|id| {
                (
                    *id,
                    kept.get(id).copied().unwrap_or_default(),
                    counted.get(id).copied().unwrap_or_default(),
                )
            })
            .collect())
    }

    /// Each item's rating summary equals what its listed remarks give.
    pub(crate) async fn verify_ratings(&self) -> AppResult<crate::infra::recovery::Report> {
        let mut report = crate::infra::recovery::Report::new("ratings");
        let mut after = 0;
        loop {
            let pairs = self.rating_pairs(after).await?;
            let Some(&(last, _, _)) = pairs.last() else {
                return Ok(report);
            };
            for (item, kept, counted) in &pairs {
                report.check(kept == counted, || {
                    format!(
                        "item {item}: remarks give {:?} stars, the summary says {:?}",
                        counted.histogram, kept.histogram
                    )
                });
            }
            after = last;
        }
    }

    /// Writes each item's summary from its listed remarks (a summary that drifted, by a hand
    /// edit of SQL or a write from before summaries existed).
    pub(crate) async fn rebuild_ratings(
        &self,
        run: &crate::infra::recovery::Rebuild<'_>,
    ) -> AppResult<()> {
        run.expect_count("SELECT COUNT(*) AS n FROM items").await?;
        let mut after = run.resume_from().await?;
        loop {
            let pairs = self.rating_pairs(after).await?;
            let Some(&(last, _, _)) = pairs.last() else {
                return Ok(());
            };
            for (item, kept, counted) in &pairs {
                if kept == counted {
                    continue;
                }
                let h = counted.histogram;
                sqlx::query(&format!(
                    "INSERT INTO item_ratings (item_id, {STARS}) VALUES ($1, $2, $3, $4, $5, $6) \
                     ON CONFLICT (item_id) DO UPDATE SET stars_1 = excluded.stars_1, \
                     stars_2 = excluded.stars_2, stars_3 = excluded.stars_3, \
                     stars_4 = excluded.stars_4, stars_5 = excluded.stars_5"
                ))
                .bind(item)
                .bind(h[0])
                .bind(h[1])
                .bind(h[2])
                .bind(h[3])
                .bind(h[4])
                .execute(&self.infra.db.pool)
                .await?;
            }
            run.finished_through(last, pairs.len() as u64).await?;
            after = last;
        }
    }
}

/// Items read per round trip by verify and rebuild.
const RATING_CHUNK: usize = 500;
