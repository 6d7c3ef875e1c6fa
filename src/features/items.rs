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

pub async fn create(ctx: &Items, created_by: i64, item: NewItem) -> AppResult<ItemRecord> {
    let id = ctx.infra.ids.next_id().await?;
    let now_ms = ctx.infra.clock.now_ms();
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
    .execute(&ctx.infra.db.pool)
    .await?;
    if let Some(location) = item.location {
        crate::features::nearby::place(&ctx.nearby, id, location).await?;
    }
    Ok(ItemRecord {
        id,
        name: item.name,
        location: item.location,
        created_at_ms: now_ms,
    })
}

pub async fn find(ctx: &Items, id: i64) -> AppResult<Option<ItemRecord>> {
    Ok(find_many(ctx, &[id]).await?.pop())
}

/// Items by id (in no particular order).
pub async fn find_many(ctx: &Items, ids: &[i64]) -> AppResult<Vec<ItemRecord>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let list = crate::infra::db::id_list(ids);
    let rows = sqlx::query(&format!(
        "SELECT id, name, lat, lng, created_at_ms FROM items WHERE id IN ({list})"
    ))
    .fetch_all(&ctx.infra.db.pool)
    .await?;
    rows.iter()
        .map(item_of)
        .collect::<Result<_, _>>()
        .map_err(Into::into)
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
