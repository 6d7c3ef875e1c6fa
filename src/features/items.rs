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
