//! The points rules: points per action and daily caps, configurable with a TOML
//! file named by `ENGAGE_POINTS_RULES` (see `points-rules.example.toml`).

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use serde::Deserialize;

#[derive(async_graphql::Enum, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PointsType {
    SignIn,
    Remark,
    LikeReceived,
    Learning,
    Answer,
    Note,
    /// A board's reward for a rank of a closed period.
    Reward,
}

impl PointsType {
    pub(crate) const ALL: [PointsType; 7] = [
        Self::SignIn,
        Self::Remark,
        Self::LikeReceived,
        Self::Learning,
        Self::Answer,
        Self::Note,
        Self::Reward,
    ];

    /// The name used in Redis, SQL and the rules file.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::SignIn => "SIGN_IN",
            Self::Remark => "REMARK",
            Self::LikeReceived => "LIKE_RECEIVED",
            Self::Learning => "LEARNING",
            Self::Answer => "ANSWER",
            Self::Note => "NOTE",
            Self::Reward => "REWARD",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Points of one action (for `SIGN_IN`, the base point of a day).
    pub points: i64,
    /// Most points of this type a user earns in one day; `None` = no cap.
    pub(crate) daily_cap: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct PointsRules {
    rules: HashMap<PointsType, Rule>,
    /// Extra sign-in points by streak length: (length, points). A streak milestone pays the
    /// bonus of the longest length up to it (`features::signin`).
    pub(crate) sign_in_bonuses: Vec<(u32, i64)>,
}

impl Default for PointsRules {
    fn default() -> Self {
        let rule = |points, daily_cap| Rule { points, daily_cap };
        Self {
            rules: HashMap::from([
                (PointsType::SignIn, rule(1, None)),
                (PointsType::Remark, rule(10, Some(50))),
                (PointsType::LikeReceived, rule(2, Some(20))),
                (PointsType::Learning, rule(10, Some(50))),
                (PointsType::Answer, rule(5, Some(20))),
                (PointsType::Note, rule(3, Some(20))),
                (PointsType::Reward, rule(1, None)),
            ]),
            sign_in_bonuses: vec![(7, 10), (14, 20), (28, 40)],
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    points: Option<i64>,
    daily_cap: Option<i64>,
    /// Only for SIGN_IN: streak length → bonus points.
    bonus: Option<BTreeMap<String, i64>>,
}

impl PointsRules {
    pub fn rule(&self, kind: PointsType) -> Rule {
        self.rules[&kind]
    }

    /// The rules of a TOML file: a table per type, every field optional (defaults apply).
    pub(crate) fn from_toml(text: &str) -> anyhow::Result<Self> {
        let file: HashMap<String, RuleFile> = toml::from_str(text)?;
        let mut rules = Self::default();
        for (name, entry) in file {
            let kind =
                PointsType::parse(&name).with_context(|| format!("unknown points type {name}"))?;
            let rule = rules
                .rules
                .get_mut(&kind)
                .expect("every type has a default");
            if let Some(points) = entry.points {
                anyhow::ensure!(points > 0, "{name}.points must be positive");
                rule.points = points;
            }
            if let Some(cap) = entry.daily_cap {
                rule.daily_cap = (cap >= 0).then_some(cap);
            }
            if let Some(bonus) = entry.bonus {
                anyhow::ensure!(
                    kind == PointsType::SignIn,
                    "only SIGN_IN has a streak bonus"
                );
                rules.sign_in_bonuses = bonus
                    .into_iter()
                    .map(|(days, points)| Ok((days.parse()?, points)))
                    .collect::<anyhow::Result<_>>()?;
            }
        }
        Ok(rules)
    }

    pub fn load(path: Option<&str>) -> anyhow::Result<Self> {
        match path {
            None => Ok(Self::default()),
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
                Self::from_toml(&text).with_context(|| format!("in {path}"))
            }
        }
    }

    /// `"7:10,14:20,28:40"`, the form the sign-in script reads.
    pub fn bonuses_arg(&self) -> String {
        self.sign_in_bonuses
            .iter()
            .map(|(days, points)| format!("{days}:{points}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_file_overrides_the_defaults() {
        let rules = PointsRules::from_toml(
            "[REMARK]\npoints = 12\ndaily_cap = 60\n[NOTE]\ndaily_cap = -1\n[SIGN_IN]\nbonus = { \"5\" = 7 }\n",
        )
        .unwrap();
        assert_eq!(
            rules.rule(PointsType::Remark),
            Rule {
                points: 12,
                daily_cap: Some(60)
            }
        );
        assert_eq!(rules.rule(PointsType::Note).daily_cap, None);
        assert_eq!(
            rules.rule(PointsType::Answer),
            Rule {
                points: 5,
                daily_cap: Some(20)
            }
        );
        assert_eq!(rules.bonuses_arg(), "5:7");
        assert!(PointsRules::from_toml("[NOPE]\npoints = 1\n").is_err());
    }
}
