//! The events of points: an award decided by a points script (XADDed by the `award`
//! helper of `lua/include/points_award.lua`, a zero award too), a spend
//! (`lua/points_spend.lua`) or a revoke (`lua/points_revoke.lua`), which the archive writes
//! to SQL; and an award asked for by another service on the intake stream.

use crate::{
    features::points::PointsType,
    infra::streams::{Event, HandleError, StreamEntry},
};

/// The type a spend is recorded with (`points_record.kind`): it is no award's.
pub(crate) const SPEND: &str = "SPEND";

/// An award, a spend or a revoke as a points script decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AwardEvent {
    pub(crate) user_id: i64,
    /// The award's type (a revoke's: the revoked award's); `None` for a spend.
    pub(crate) kind: Option<PointsType>,
    /// What was awarded (up to the daily cap; 0 when the cap was reached); what a spend or a
    /// revoke took, negative.
    pub(crate) points: i64,
    pub(crate) requested: i64,
    pub(crate) idempotency_key: String,
    /// The season (`YYYYMM`) whose board counted it.
    pub(crate) season: i64,
    pub(crate) at_ms: i64,
    /// The user's day (`YYYYMMDD`) whose daily totals counted an award, in the user's zone
    /// (absent from spends, revokes and the awards of earlier versions).
    pub(crate) date: Option<i64>,
    /// The day a sign-in award signed, when it is one.
    pub(crate) sign_in: Option<SignedDay>,
    /// Why, for a spend or a revoke.
    pub(crate) reason: Option<String>,
    /// The user's day (`YYYYMMDD`) a spend bought a streak freeze on, when it did.
    pub(crate) freeze_bought_on: Option<i64>,
}

impl AwardEvent {
    /// An award's type (`None` for a spend, or a type this version does not know) and the
    /// streak bonus its sign-in paid (0 for none), read from those two fields alone: a
    /// consumer that wants few awards passes over the rest without reading the whole event,
    /// a dozen numbers and three strings. The whole event, read, says whether it is sound.
    pub(crate) fn glance(entry: &StreamEntry) -> (Option<PointsType>, i64) {
        let [kind, bonus] = entry.values(["type", "bonus"]);
        (
            kind.and_then(PointsType::parse),
            bonus.and_then(|bonus| bonus.parse().ok()).unwrap_or(0),
        )
    }

    /// The type's text in SQL.
    pub(crate) fn kind_text(&self) -> &'static str {
        self.kind.map_or(SPEND, PointsType::as_str)
    }
}

/// The day (`YYYYMMDD`) a SIGN_IN award signed, and whether it was made up; the days a
/// streak freeze kept before it, and the freezes its streak earned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignedDay {
    pub(crate) day: i64,
    pub(crate) made_up: bool,
    pub(crate) frozen: Vec<i64>,
    pub(crate) freezes_earned: i64,
    /// The streak this sign-in or repair made, and the milestone bonus it paid (0: none
    /// reached); 0 and 0 in the events of earlier versions.
    pub(crate) streak: i64,
    pub(crate) milestone_bonus: i64,
    /// The zone a user's first sign-in recorded as the user's, to be written to
    /// `sign_in_zones` (`lua/signin_sign.lua`).
    pub(crate) first_zone: Option<FirstZone>,
}

/// A user's first zone as a sign-in recorded it: `sign_in_zones`' first row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FirstZone {
    pub(crate) zone: String,
    /// The zone before it (the server's, when points today held a cap), `None` for none.
    pub(crate) previous: Option<String>,
    /// The first day (`YYYYMMDD`) counted in `zone`, `None` for always.
    pub(crate) from_day: Option<i64>,
    pub(crate) changed_ms: i64,
}

/// An award's fields, in the order the scripts write them (`lua/include/points_award.lua`:
/// a sign-in's day and zone after the date, the free-text key last; a spend's and a revoke's
/// reason after the key): [`StreamEntry::values`] finds each at the first name it tries.
const AWARD_FIELDS: [&str; 20] = [
    "user",
    "type",
    "points",
    "requested",
    "season",
    "at",
    "date",
    "day",
    "made_up",
    "frozen",
    "earned",
    "streak",
    "bonus",
    "zone",
    "zone_previous",
    "zone_from",
    "zone_changed_ms",
    "key",
    "reason",
    "bought",
];

impl Event for AwardEvent {
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError> {
        let [user, kind, points, requested, season, at, date, day, made_up, frozen, earned, streak, bonus, zone, zone_previous, zone_from, zone_changed_ms, key, reason, bought] =
            entry.values(AWARD_FIELDS);
        let number = |name, value| entry.number_of(name, value);
        let optional = |name, value| entry.optional_number_of(name, value);
        let sign_in = match day {
            Some(_) => Some(SignedDay {
                day: number("day", day)?,
                made_up: number("made_up", made_up)? == 1,
                // Absent from the awards of earlier versions.
                frozen: match frozen {
                    Some(days) if days != "-" => days
                        .split(',')
                        .map(|day| {
                            day.parse().map_err(|_| {
                                HandleError::Poison(format!("entry {}: frozen {days}", entry.id))
                            })
                        })
                        .collect::<Result<_, _>>()?,
                    _ => Vec::new(),
                },
                freezes_earned: optional("earned", earned)?.unwrap_or(0),
                streak: optional("streak", streak)?.unwrap_or(0),
                milestone_bonus: optional("bonus", bonus)?.unwrap_or(0),
                first_zone: match zone {
                    Some(zone) => Some(FirstZone {
                        zone: zone.to_string(),
                        previous: zone_previous
                            .filter(|previous| !previous.is_empty())
                            .map(str::to_string),
                        from_day: Some(number("zone_from", zone_from)?).filter(|day| *day > 0),
                        changed_ms: number("zone_changed_ms", zone_changed_ms)?,
                    }),
                    None => None,
                },
            }),
            None => None,
        };
        let kind = match entry.required("type", kind)? {
            SPEND => None,
            kind => Some(parse_kind(entry, kind)?),
        };
        Ok(Self {
            user_id: number("user", user)?,
            kind,
            points: number("points", points)?,
            requested: number("requested", requested)?,
            idempotency_key: entry.required("key", key)?.to_string(),
            season: number("season", season)?,
            at_ms: number("at", at)?,
            date: optional("date", date)?,
            sign_in,
            reason: reason.map(str::to_string),
            freeze_bought_on: optional("bought", bought)?,
        })
    }

    fn to_fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            ("user", self.user_id.to_string()),
            ("type", self.kind_text().to_string()),
            ("points", self.points.to_string()),
            ("requested", self.requested.to_string()),
            ("key", self.idempotency_key.clone()),
            ("season", self.season.to_string()),
            ("at", self.at_ms.to_string()),
        ];
        if let Some(date) = self.date {
            fields.push(("date", date.to_string()));
        }
        if let Some(signed) = &self.sign_in {
            fields.push(("day", signed.day.to_string()));
            fields.push(("made_up", i64::from(signed.made_up).to_string()));
            let frozen: Vec<String> = signed.frozen.iter().map(i64::to_string).collect();
            fields.push((
                "frozen",
                if frozen.is_empty() {
                    "-".into()
                } else {
                    frozen.join(",")
                },
            ));
            fields.push(("earned", signed.freezes_earned.to_string()));
            fields.push(("streak", signed.streak.to_string()));
            fields.push(("bonus", signed.milestone_bonus.to_string()));
            if let Some(first) = &signed.first_zone {
                fields.push(("zone", first.zone.clone()));
                fields.push(("zone_previous", first.previous.clone().unwrap_or_default()));
                fields.push(("zone_from", first.from_day.unwrap_or(0).to_string()));
                fields.push(("zone_changed_ms", first.changed_ms.to_string()));
            }
        }
        if let Some(reason) = &self.reason {
            fields.push(("reason", reason.clone()));
        }
        if let Some(day) = self.freeze_bought_on {
            fields.push(("bought", day.to_string()));
        }
        fields
    }
}

/// An award another service asks for by XADDing to the intake stream (`awardPoints` does
/// the same through GraphQL). Its key is the service's own: the intake puts it in the
/// service namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeAward {
    pub user_id: i64,
    pub kind: PointsType,
    pub points: i64,
    pub key: String,
}

impl Event for IntakeAward {
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError> {
        Ok(Self {
            user_id: entry.number("user")?,
            kind: kind_of(entry)?,
            points: entry.number("points")?,
            key: entry.field("key")?.to_string(),
        })
    }

    fn to_fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("user", self.user_id.to_string()),
            ("type", self.kind.as_str().to_string()),
            ("points", self.points.to_string()),
            ("key", self.key.clone()),
        ]
    }
}

fn kind_of(entry: &StreamEntry) -> Result<PointsType, HandleError> {
    parse_kind(entry, entry.field("type")?)
}

fn parse_kind(entry: &StreamEntry, kind: &str) -> Result<PointsType, HandleError> {
    PointsType::parse(kind)
        .ok_or_else(|| HandleError::Poison(format!("entry {}: unknown type {kind}", entry.id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_back_what_they_write() {
        let award = AwardEvent {
            user_id: 1,
            kind: Some(PointsType::SignIn),
            points: 5,
            requested: 7,
            idempotency_key: "signin:1:2026-11-23".into(),
            season: 202611,
            at_ms: 9,
            date: Some(20261123),
            sign_in: Some(SignedDay {
                day: 20261123,
                made_up: true,
                frozen: vec![20261121, 20261122],
                freezes_earned: 1,
                streak: 7,
                milestone_bonus: 10,
                first_zone: Some(FirstZone {
                    zone: "America/Los_Angeles".into(),
                    previous: Some("Asia/Shanghai".into()),
                    from_day: Some(20261124),
                    changed_ms: 8,
                }),
            }),
            reason: None,
            freeze_bought_on: None,
        };
        let entry = StreamEntry::of_event("awards", "1-0", &award);
        assert_eq!(AwardEvent::from_entry(&entry).unwrap(), award);
        assert_eq!(AwardEvent::glance(&entry), (Some(PointsType::SignIn), 10));
        let spend = AwardEvent {
            kind: None,
            points: -4,
            requested: 4,
            idempotency_key: "spend:a b".into(),
            date: None,
            sign_in: None,
            reason: Some("a hat, blue".into()),
            freeze_bought_on: Some(20261127),
            ..award
        };
        let entry = StreamEntry::of_event("awards", "2-0", &spend);
        assert_eq!(AwardEvent::from_entry(&entry).unwrap(), spend);
        assert_eq!(AwardEvent::glance(&entry), (None, 0));
        let asked = IntakeAward {
            user_id: 1,
            kind: PointsType::Answer,
            points: 3,
            key: "answer:9".into(),
        };
        let entry = StreamEntry::of_event("intake", "1-0", &asked);
        assert_eq!(IntakeAward::from_entry(&entry).unwrap(), asked);
    }
}
