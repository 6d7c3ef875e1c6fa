//! Items: the things remarks, vouchers and nearby search are about (products, shops,
//! courses). Admins create them.

use sqlx::Row;

use crate::{
    features::nearby::{Location, Nearby},
    infra::{
        error::{AppError, AppResult},
        Infra,
    },
};

/// What the item catalogue works with: an item with a location is placed for search.
#[derive(Clone)]
pub struct Items {
    pub infra: Infra,
    pub nearby: Nearby,
}

#[derive(Debug, Clone)]
pub struct ItemRecord {
    pub id: i64,
    pub name: String,
    pub location: Option<Location>,
    pub created_at_ms: i64,
}

pub struct NewItem {
    pub name: String,
    pub location: Option<Location>,
}

pub const MAX_NAME_CHARS: usize = 200;

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
    pub async fn create(&self, created_by: i64, item: NewItem) -> AppResult<ItemRecord> {
        let id = self.infra.ids.next_id().await?;
        let now_ms = self.infra.clock.now_ms();
        sqlx::query(
            "INSERT INTO items (id, name, lat, lng, created_by, created_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(&item.name)
        .bind(item.location.map(|l| l.lat))
        .bind(item.location.map(|l| l.lng))
        .bind(created_by)
        .bind(now_ms)
        .execute(&self.infra.db.pool)
        .await?;
        if let Some(location) = item.location {
            self.nearby.place(id, location).await?;
        }
        Ok(ItemRecord {
            id,
            name: item.name,
            location: item.location,
            created_at_ms: now_ms,
        })
    }

    pub async fn find(&self, id: i64) -> AppResult<Option<ItemRecord>> {
        Ok(self.find_many(&[id]).await?.pop())
    }

    /// Items by id (in no particular order).
    pub async fn find_many(&self, ids: &[i64]) -> AppResult<Vec<ItemRecord>> {
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
