//! "Near me" (seed 004): items with a location are kept in one Redis GEO set; a search asks
//! for the nearest within a radius, nearest first.

use crate::{
    app::AppState,
    error::{AppError, AppResult},
    items::Location,
    redis::Keys,
};

/// The widest search, in km (a sensible bound for "near", and for the cost of a search).
pub const MAX_RADIUS_KM: f64 = 1000.0;

impl Keys {
    pub fn item_locations(&self) -> String {
        self.tagged("geo", "items")
    }
}

/// Adds or moves an item on the map.
pub async fn place(state: &AppState, item_id: i64, location: Location) -> AppResult<()> {
    let mut conn = state.redis.get().await?;
    let _: i64 = redis::cmd("GEOADD")
        .arg(state.keys.item_locations())
        .arg(location.lng)
        .arg(location.lat)
        .arg(item_id)
        .query_async(&mut *conn)
        .await?;
    Ok(())
}

/// Items within `radius_km` of a point, nearest first: `(item id, distance km)` from
/// position `offset`, and whether more follow.
pub async fn search(
    state: &AppState,
    from: Location,
    radius_km: f64,
    first: usize,
    offset: usize,
) -> AppResult<(Vec<(i64, f64)>, bool)> {
    if !(radius_km.is_finite() && radius_km > 0.0 && radius_km <= MAX_RADIUS_KM) {
        return Err(AppError::bad_input(format!(
            "radiusKm must be above 0 and at most {MAX_RADIUS_KM}"
        )));
    }
    let mut conn = state.redis.get().await?;
    let found: Vec<(i64, f64)> = redis::cmd("GEOSEARCH")
        .arg(state.keys.item_locations())
        .arg("FROMLONLAT")
        .arg(from.lng)
        .arg(from.lat)
        .arg("BYRADIUS")
        .arg(radius_km)
        .arg("km")
        .arg("ASC")
        .arg("COUNT")
        .arg(offset + first + 1)
        .arg("WITHDIST")
        .query_async(&mut *conn)
        .await?;
    let more = found.len() > offset + first;
    Ok((found.into_iter().skip(offset).take(first).collect(), more))
}
