//! "Near me": items with a location are kept in one Redis GEO set (placed there
//! by `createItem`, through the outbox of [`crate::features::items`]); a search asks for the
//! nearest within a radius, nearest first.
//!
//! Pages go by position, and GEOSEARCH cannot skip: a page at position `p` makes Redis find
//! the `p + first + 1` nearest. So a search serves its [`MAX_RESULTS`] nearest items and no
//! more (a cursor past them is `BAD_USER_INPUT`), and one script (`lua/nearby_search.lua`)
//! sends back only the page and one more, not everything before it. Rejected: a cursor
//! carrying the last distance, since GEOSEARCH has no inner radius to start from.

pub(crate) mod recovery;

use crate::infra::page::PageArgs;
use crate::infra::{
    error::{AppError, AppResult},
    redis::{
        scripts::{NearbySearch, NearbySearchArgs, Replies},
        Keys,
    },
    Infra,
};

/// A point on the map, as Redis GEO accepts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Location {
    pub(crate) lat: f64,
    pub(crate) lng: f64,
}

impl Location {
    /// Validates coordinates; both or neither must be given.
    pub(crate) fn from_parts(lat: Option<f64>, lng: Option<f64>) -> AppResult<Option<Self>> {
        match (lat, lng) {
            (None, None) => Ok(None),
            (Some(lat), Some(lng)) => Self::new(lat, lng).map(Some),
            _ => Err(AppError::bad_input("give both lat and lng, or neither")),
        }
    }

    pub(crate) fn new(lat: f64, lng: f64) -> AppResult<Self> {
        // Redis GEO accepts latitudes up to ±85.05112878 only (Web Mercator).
        if !(lat.is_finite() && (-85.051_128_78..=85.051_128_78).contains(&lat)) {
            return Err(AppError::bad_input(
                "lat must be between -85.05112878 and 85.05112878",
            ));
        }
        if !(lng.is_finite() && (-180.0..=180.0).contains(&lng)) {
            return Err(AppError::bad_input("lng must be between -180 and 180"));
        }
        Ok(Self { lat, lng })
    }
}

/// What "near me" search works with.
#[derive(Clone)]
pub struct Nearby {
    pub(crate) infra: Infra,
}

/// The widest search, in km (a sensible bound for "near", and for the cost of a search).
pub(crate) const MAX_RADIUS_KM: f64 = 1000.0;

/// The nearest items a search pages through, at most: the largest window GEOSEARCH is asked
/// for (plus one, to know whether more follow).
pub(crate) const MAX_RESULTS: usize = 1000;

impl Keys {
    pub fn item_locations(&self) -> String {
        self.tagged("geo", "items")
    }
}

impl Nearby {
    /// Adds or moves items on the map, in one command.
    pub(crate) async fn place(&self, items: &[(i64, Location)]) -> AppResult<()> {
        if items.is_empty() {
            return Ok(());
        }
        let mut add = redis::cmd("GEOADD");
        add.arg(self.infra.keys.item_locations());
        for (item_id, location) in items {
            add.arg(location.lng).arg(location.lat).arg(item_id);
        }
        let mut conn = self.infra.redis.get().await?;
        let _: i64 = add.query_async(&mut *conn).await?;
        Ok(())
    }

    /// Items within `radius_km` of a point, nearest first: `(item id, distance km)` from
    /// position `offset`, and whether more follow. The page ends at [`MAX_RESULTS`] at the
    /// latest; `offset` must not be beyond it.
    pub(crate) async fn search(
        &self,
        from: Location,
        radius_km: f64,
        page: PageArgs<usize>,
    ) -> AppResult<(Vec<(i64, f64)>, bool)> {
        let PageArgs {
            first,
            after: offset,
        } = page;
        if !(radius_km.is_finite() && radius_km > 0.0 && radius_km <= MAX_RADIUS_KM) {
            return Err(AppError::bad_input(format!(
                "radiusKm must be above 0 and at most {MAX_RADIUS_KM}"
            )));
        }
        if offset > MAX_RESULTS {
            return Err(AppError::bad_input(format!(
                "a search serves its {MAX_RESULTS} nearest items"
            )));
        }
        let first = first.min(MAX_RESULTS - offset);
        if first == 0 {
            return Ok((Vec::new(), false));
        }
        let locations = NearbySearch {
            locations: self.infra.keys.item_locations(),
        };
        let args = NearbySearchArgs {
            lng: from.lng,
            lat: from.lat,
            radius_km,
            skip: offset,
            take: first,
        };
        let (more, found) = self.infra.scripts().call(&locations, &args).await?;
        // The window's end is the end of the list, whatever lies beyond it.
        let more = more == 1 && offset + first < MAX_RESULTS;
        Ok((found, more))
    }
}

/// `{ more (1 when items follow the page), { {id, distance km}, ... } }`.
impl Replies for NearbySearch {
    type Reply = (i64, Vec<(i64, f64)>);
}
