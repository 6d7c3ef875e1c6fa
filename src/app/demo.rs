//! `engage seed-demo`: users, located items, remarks, likes by several users on each
//! other's remarks, follows between the users, sign-ins and a season board, a voucher on
//! sale now and a weekly "steps" board, to explore in the playground and on the dashboard.
//! The first item draws the most remarks and likes: the dashboard opens on it by default.
//! Everything goes through the same domain functions as the API, so the demo data is as
//! real as any (likes reach the archive once a server runs).

use indicatif::{ProgressBar, ProgressStyle};
use rand::{seq::IndexedRandom, Rng};

use crate::{
    app::AppState,
    features::{
        boards::{
            writes::{Caller, Submission},
            BoardOperator, BoardReset, NewBoard, SortOrder,
        },
        items::NewItem,
        remarks::{likes::Vote, NewRemark},
        vouchers::NewVoucher,
    },
    infra::error::ErrorCode,
};

const NAMES: &[&str] = &[
    "Mei", "Arjun", "Sofia", "Kenji", "Amara", "Lucas", "Ines", "Wei", "Noah", "Zara",
];
const ITEMS: &[(&str, f64, f64)] = &[
    ("Harbour Noodle Bar", 31.2304, 121.4737),
    ("Lantern Tea House", 31.2243, 121.4768),
    ("Bund Bicycle Rental", 31.2400, 121.4900),
    ("Pottery Course for Beginners", 31.2150, 121.4450),
    ("Night Market Dumplings", 31.2330, 121.4850),
];
const REVIEWS: &[&str] = &[
    "Loved it, will come back.",
    "Friendly staff and fair prices.",
    "A bit crowded at lunchtime, still worth it.",
    "Exactly as described.",
    "Great for a rainy afternoon.",
];

pub(crate) async fn seed(state: &AppState, users: i64) -> anyhow::Result<()> {
    let users = users.max(2);
    let steps = users as u64 + ITEMS.len() as u64 + users as u64 * 4 + 2;
    let bar = ProgressBar::new(steps).with_style(
        ProgressStyle::with_template("{spinner} {msg:<10} [{bar:40}] {pos}/{len}")?
            .progress_chars("=> "),
    );

    bar.set_message("users");
    let now_ms = state.infra.clock.now_ms();
    for id in 1..=users {
        let name = format!("{} {}", NAMES[(id as usize - 1) % NAMES.len()], id);
        sqlx::query("INSERT INTO users (id, name, created_at_ms) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING")
            .bind(id)
            .bind(name)
            .bind(now_ms)
            .execute(&state.infra.db.pool)
            .await?;
        bar.inc(1);
    }

    bar.set_message("items");
    let mut item_ids = Vec::new();
    for (name, lat, lng) in ITEMS {
        let item = state
            .features
            .items
            .create(1, NewItem::new(name, Some(*lat), Some(*lng))?)
            .await?;
        item_ids.push(item.id);
        bar.inc(1);
    }

    bar.set_message("remarks");
    // Everyone reviews the first item, and one other: the first is the most active.
    let mut remarks: Vec<(i64, i64)> = Vec::new();
    for author in 1..=users {
        let other = item_ids[(author as usize) % item_ids.len()];
        for item in [item_ids[0], other] {
            let (score, text) = {
                let mut rng = rand::rng();
                (
                    rng.random_range(3..=5),
                    *REVIEWS.choose(&mut rng).unwrap_or(&REVIEWS[0]),
                )
            };
            match state
                .features
                .remarks
                .create(author, NewRemark::new(item, score, text, Vec::new())?)
                .await
            {
                Ok(remark) => remarks.push((remark.id, author)),
                // Seeded before, or the other item is the first.
                Err(error) if error.code() == ErrorCode::Conflict => {}
                Err(error) => return Err(anyhow::anyhow!("{error}")),
            }
        }
        bar.inc(1);
    }
    let remark_ids: Vec<i64> = remarks.iter().map(|(id, _)| *id).collect();

    bar.set_message("likes");
    // Each user likes a few of the others' remarks, so that every remark of the first item
    // has likes from several users.
    for voter in 1..=users {
        let picks: Vec<i64> = {
            let mut rng = rand::rng();
            let others: Vec<i64> = remarks
                .iter()
                .filter(|(_, author)| *author != voter)
                .map(|(id, _)| *id)
                .collect();
            let count = rng.random_range(3..=8).min(others.len());
            others.choose_multiple(&mut rng, count).copied().collect()
        };
        for remark in picks {
            state
                .features
                .remarks
                .vote(voter, remark, Vote::Like)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        bar.inc(1);
    }
    bar.set_message("follows");
    for user in 1..=users {
        let followees: Vec<i64> = {
            let mut rng = rand::rng();
            (1..=users)
                .filter(|other| *other != user)
                .collect::<Vec<_>>()
                .choose_multiple(&mut rng, 3)
                .copied()
                .collect()
        };
        for followee in followees {
            state
                .features
                .feed
                .follow(user, followee)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        bar.inc(1);
    }

    bar.set_message("sign-ins");
    for user in 1..=users {
        state
            .features
            .signin
            .sign_in(user, None)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let extra: i64 = rand::rng().random_range(0..40);
        if extra > 0 {
            state
                .features
                .points
                .award(
                    user,
                    crate::features::points::PointsType::Learning,
                    extra,
                    &format!("demo:{user}"),
                )
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        bar.inc(1);
    }
    bar.set_message("voucher");
    let now = state.infra.clock.now();
    let voucher = state
        .features
        .vouchers
        .create(NewVoucher {
            item_id: item_ids[0],
            title: "Half-price noodles".into(),
            stock: 100,
            begins_at: now - chrono::Duration::hours(1),
            ends_at: now + chrono::Duration::days(7),
            pay_within_seconds: 900,
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    bar.inc(1);

    bar.set_message("steps");
    steps_board(state, users).await?;
    bar.inc(1);
    bar.finish_with_message("done");
    println!(
        "seeded {users} users, {} items (ids {:?}), {} remarks, voucher {} on sale, board steps; \
         try `engage token --user 1`",
        item_ids.len(),
        item_ids,
        remark_ids.len(),
        voucher.id
    );
    println!(
        "dashboard: http://{}/dashboard (steps: http://{}/dashboard?board=steps)",
        state.config.bind, state.config.bind
    );
    Ok(())
}

/// A weekly "steps" board (created once), with this week's steps of the first users.
async fn steps_board(state: &AppState, users: i64) -> anyhow::Result<()> {
    let boards = &state.features.boards;
    let created = boards
        .create(NewBoard {
            key: "steps".into(),
            title: "Steps this week".into(),
            reset: BoardReset::Weekly,
            operator: BoardOperator::Increment,
            order: SortOrder::Desc,
            authoritative: false,
            starts_at: None,
            ends_at: None,
            join_required: false,
            max_entries: None,
            rewards: Vec::new(),
        })
        .await;
    match created {
        Ok(_) => {}
        Err(error) if error.code() == ErrorCode::Conflict => {}
        Err(error) => return Err(anyhow::anyhow!("{error}")),
    }
    for user in 1..=users.min(8) {
        let steps: i64 = rand::rng().random_range(2_000..20_000);
        boards
            .submit(
                Caller::Privileged,
                "steps",
                Submission {
                    user_id: user,
                    score: steps,
                    subscore: 0,
                    metadata: None,
                    idempotency_key: uuid::Uuid::new_v4().to_string(),
                },
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}
