//! The features, one folder each: domain rules, keys, script wrappers, SQL, stream
//! consumers, live streams and recovery. A feature imports infra and, where one feature is
//! built on another, that feature (sign-in awards points); never the API or the wiring.

pub mod feed;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod nearby;
pub mod points;
pub mod recovery;
pub mod remarks;
pub(crate) mod signin;
pub mod users;
pub mod vouchers;

use std::sync::Arc;

use crate::infra::{config::Config, metrics::BoundedLabel, Infra};

/// Every feature's context of one instance, built once from the shared infrastructure and
/// the configuration. The wiring hands each part to whoever needs it (a resolver receives
/// one feature's context, a background task one feature's), never the whole.
pub struct Features {
    pub users: Arc<users::UserDirectory>,
    pub items: items::Items,
    pub nearby: nearby::Nearby,
    pub(crate) points: points::Points,
    pub(crate) signin: signin::SignIn,
    pub leaderboard: leaderboard::Leaderboards,
    pub remarks: remarks::Remarks,
    pub feed: feed::Feed,
    pub jobs: jobs::Jobs,
    pub vouchers: vouchers::Vouchers,
}

impl Features {
    pub(crate) fn new(infra: &Infra, config: &Config) -> anyhow::Result<Self> {
        let users = Arc::new(users::UserDirectory::new(infra.clone()));
        let nearby = nearby::Nearby {
            infra: infra.clone(),
        };
        let items = items::Items {
            infra: infra.clone(),
            nearby: nearby.clone(),
        };
        let points = points::Points {
            infra: infra.clone(),
            settings: Arc::new(points::PointsSettings::from_config(config)?),
        };
        let jobs = jobs::Jobs {
            infra: infra.clone(),
            registry: Arc::new(jobs::JobRegistry::from_config(config)),
            settings: jobs::JobsSettings::from_config(config),
            topic_labels: Arc::new(BoundedLabel::new(jobs::TOPIC_LABELS)),
        };
        Ok(Self {
            signin: signin::SignIn {
                infra: infra.clone(),
                points: points.clone(),
            },
            leaderboard: leaderboard::Leaderboards {
                infra: infra.clone(),
                boards: Arc::default(),
                rollover_check: std::time::Duration::from_secs(
                    config.rollover_check_seconds.max(1),
                ),
            },
            remarks: remarks::Remarks {
                infra: infra.clone(),
                settings: Arc::new(remarks::RemarkSettings::from_config(config)),
                items: items.clone(),
                like_counts: Arc::default(),
            },
            feed: feed::Feed {
                infra: infra.clone(),
                users: users.clone(),
                settings: feed::FeedSettings::from_config(config),
            },
            vouchers: vouchers::Vouchers {
                infra: infra.clone(),
                items: items.clone(),
                jobs: jobs.clone(),
                settings: vouchers::VoucherSettings::from_config(config),
            },
            users,
            items,
            nearby,
            points,
            jobs,
        })
    }
}
