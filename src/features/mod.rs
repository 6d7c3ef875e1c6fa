//! The features, one folder each: domain rules, keys, script wrappers, SQL, stream
//! consumers, live streams and recovery. A feature imports infra and, where one feature is
//! built on another, that feature (sign-in awards points); never the API or the wiring.

pub mod boards;
pub mod feed;
pub mod items;
pub mod jobs;
pub mod leaderboard;
pub mod nearby;
pub mod notifications;
pub mod points;
pub mod recovery;
pub mod remarks;
pub(crate) mod signin;
pub mod users;
pub mod vouchers;
pub(crate) mod zones;

use std::sync::Arc;

use crate::infra::{metrics::BoundedLabel, Infra};

/// Each feature's settings, as read at start (each declared in its feature's `settings.rs`):
/// the wiring lends them to [`Features::new`].
pub struct FeatureSettings<'a> {
    pub points: &'a points::PointsSettings,
    pub signin: &'a signin::SignInSettings,
    pub leaderboard: &'a leaderboard::LeaderboardSettings,
    pub remarks: &'a remarks::RemarkSettings,
    pub feed: &'a feed::FeedSettings,
    pub vouchers: &'a vouchers::VoucherSettings,
    pub jobs: &'a jobs::JobsSettings,
}

/// Every feature's context of one instance, built once from the shared infrastructure and
/// the features' settings. The wiring hands each part to whoever needs it (a resolver receives
/// one feature's context, a background task one feature's), never the whole.
pub struct Features {
    pub users: Arc<users::UserDirectory>,
    pub items: items::Items,
    pub nearby: nearby::Nearby,
    pub(crate) points: points::Points,
    pub(crate) signin: signin::SignIn,
    pub leaderboard: leaderboard::Leaderboards,
    pub boards: boards::Boards,
    pub remarks: remarks::Remarks,
    pub feed: feed::Feed,
    pub jobs: jobs::Jobs,
    pub vouchers: vouchers::Vouchers,
    pub notifications: notifications::Notifications,
}

impl Features {
    pub fn new(infra: &Infra, settings: FeatureSettings) -> anyhow::Result<Self> {
        let mode = infra.instance.redis.mode;
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
            rules: Arc::new(settings.points.rules()?),
            zones: zones::Zones::new(infra.clone()),
        };
        let jobs = jobs::Jobs {
            infra: infra.clone(),
            registry: Arc::new(jobs::JobRegistry::new(settings.jobs)),
            settings: Arc::new(settings.jobs.clone()),
            topic_labels: Arc::new(BoundedLabel::new(jobs::TOPIC_LABELS)),
        };
        let leaderboard = leaderboard::Leaderboards {
            infra: infra.clone(),
            boards: Arc::default(),
            rollover_check: settings.leaderboard.rollover_check(),
            points: points.clone(),
            season_rewards: Arc::new(settings.leaderboard.season_rewards()?),
        };
        let signin = signin::SignIn::new(infra.clone(), points.clone(), settings.signin.clone());
        let boards = boards::Boards::new(infra.clone(), points.clone(), leaderboard.clone());
        let vouchers = vouchers::Vouchers {
            infra: infra.clone(),
            items: items.clone(),
            jobs: jobs.clone(),
            settings: settings.vouchers.for_redis(mode),
        };
        let notifications = notifications::Notifications {
            infra: infra.clone(),
            jobs: jobs.clone(),
            vouchers: vouchers.clone(),
            boards: boards.clone(),
            signin: signin.clone(),
            users: users.clone(),
        };
        Ok(Self {
            signin,
            boards,
            leaderboard,
            remarks: remarks::Remarks {
                infra: infra.clone(),
                caches: Arc::new(remarks::RemarkCaches::new(
                    settings.remarks.page_cache_ttl(),
                )),
                settings: Arc::new(settings.remarks.clone().for_redis(mode)),
                items: items.clone(),
                like_counts: Arc::default(),
            },
            feed: feed::Feed {
                infra: infra.clone(),
                users: users.clone(),
                settings: *settings.feed,
            },
            vouchers,
            notifications,
            users,
            items,
            nearby,
            points,
            jobs,
        })
    }
}
