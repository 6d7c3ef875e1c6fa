//! The `Node` interface of the Relay Global Object Identification specification: every
//! object with a global id (`id.rs`) implements it, and `Query.node`/`Query.nodes` fetch
//! objects by their ids alone, which is how a Relay client refetches what it shows.
//!
//! Each kind is read as its own root field reads it, with the same permissions: items,
//! remarks, users, vouchers, seasons and boards are public; an order is its buyer's alone
//! (null for anyone else, as if it did not exist), and so is a notification its user's; a job or a topic needs the role `job`
//! needs, and without it answers `job`'s error. An id that names nothing is null.

use std::collections::HashMap;

use async_graphql::{dataloader::DataLoader, Context, Guard, Interface, ID};
use futures::future::join_all;

use super::{
    boards::Board,
    id::AnyNodeId,
    items::Item,
    jobs::{self, Job, Topic},
    leaderboard::Season,
    notifications::Notification,
    remarks::Remark,
    users::User,
    vouchers::{Order, Voucher},
    ContextExt,
};
use crate::{
    features::{
        boards::Boards,
        items::{ItemRecord, Items},
        jobs::{could_name_a_job, Jobs},
        leaderboard::Leaderboards,
        notifications::Notifications,
        remarks::{RemarkRecord, Remarks},
        users::{UserLoader, UserRecord},
        vouchers::Vouchers,
    },
    infra::{auth, error::AppResult},
};

/// The most ids `nodes` takes at once, as a page holds at most 100 rows.
pub(crate) const MAX_NODES: usize = 100;

/// An object with an ID.
#[derive(Interface)]
#[graphql(field(name = "id", ty = "ID", desc = "The ID of the object."))]
pub(crate) enum Node {
    Item(Item),
    Remark(Remark),
    User(User),
    Voucher(Voucher),
    Order(Order),
    Job(Job),
    Topic(Topic),
    Season(Season),
    Board(Board),
    Notification(Notification),
}

/// The objects of `ids`, in their order: each `None` where the id names nothing this viewer
/// may see, or `Err` where it names a job the viewer lacks the role for. Items, remarks and
/// users are read in one batch each (remarks' like counts then load through the request's
/// batch loader, as on a page); vouchers, orders and jobs one by one, at once.
pub(crate) async fn load(
    ctx: &Context<'_>,
    ids: &[Option<AnyNodeId>],
) -> AppResult<Vec<async_graphql::Result<Option<Node>>>> {
    let batch = Batch::read(ctx, ids).await?;
    let nodes = join_all(ids.iter().map(|id| async {
        match id {
            Some(id) => batch.node(ctx, id).await,
            None => Ok(None),
        }
    }))
    .await;
    Ok(nodes)
}

/// What the batched kinds read, by id.
#[derive(Default)]
struct Batch {
    items: HashMap<i64, ItemRecord>,
    remarks: HashMap<i64, RemarkRecord>,
    users: HashMap<i64, UserRecord>,
}

impl Batch {
    async fn read(ctx: &Context<'_>, ids: &[Option<AnyNodeId>]) -> AppResult<Self> {
        let (mut items, mut remarks, mut users) = (Vec::new(), Vec::new(), Vec::new());
        for id in ids.iter().flatten() {
            match id {
                AnyNodeId::Item(id) => items.push(*id),
                AnyNodeId::Remark(id) => remarks.push(*id),
                AnyNodeId::User(id) => users.push(*id),
                _ => {}
            }
        }
        let mut batch = Self::default();
        if !items.is_empty() {
            let found = ctx.feature::<Items>().find_many(&items).await?;
            batch.items = found.into_iter().map(|item| (item.id, item)).collect();
        }
        if !remarks.is_empty() {
            batch.remarks = ctx.feature::<Remarks>().find_many(&remarks).await?;
        }
        if !users.is_empty() {
            let loader = ctx.data_unchecked::<DataLoader<UserLoader>>();
            batch.users = loader.load_many(users).await.map_err(|e| (*e).clone())?;
        }
        Ok(batch)
    }

    async fn node(&self, ctx: &Context<'_>, id: &AnyNodeId) -> async_graphql::Result<Option<Node>> {
        Ok(match id {
            AnyNodeId::Item(id) => self.items.get(id).cloned().map(|r| Item(r).into()),
            AnyNodeId::Remark(id) => self
                .remarks
                .get(id)
                .filter(|r| r.shown_to(auth::viewer(ctx)))
                .cloned()
                .map(|r| Remark::from(r).into()),
            AnyNodeId::User(id) => self.users.get(id).cloned().map(|r| User(r).into()),
            AnyNodeId::Voucher(id) => ctx
                .feature::<Vouchers>()
                .find(*id)
                .await?
                .map(|r| Voucher(r).into()),
            AnyNodeId::Order(id) => {
                let buyer = auth::viewer(ctx).map(|viewer| viewer.user_id);
                ctx.feature::<Vouchers>()
                    .find_order(*id)
                    .await?
                    .filter(|order| Some(order.buyer_id) == buyer)
                    .map(|r| Order(r).into())
            }
            AnyNodeId::Season(month) => ctx
                .feature::<Leaderboards>()
                .season(*month)
                .map(|s| Season(s).into()),
            AnyNodeId::Board(key) => ctx
                .feature::<Boards>()
                .find(key)
                .await?
                .map(|def| Board(def).into()),
            // The viewer's own alone, as if another's did not exist.
            AnyNodeId::Notification(id) => {
                let Some(viewer) = auth::viewer(ctx) else {
                    return Ok(None);
                };
                ctx.feature::<Notifications>()
                    .find(*id)
                    .await?
                    .filter(|record| record.user_id == viewer.user_id)
                    .map(|record| Notification(record).into())
            }
            AnyNodeId::Job(key) => {
                jobs::readers().check(ctx).await?;
                if !could_name_a_job(&key.topic, &key.id) {
                    return Ok(None);
                }
                ctx.feature::<Jobs>()
                    .find(&key.topic, &key.id)
                    .await?
                    .map(|view| Job(view).into())
            }
            AnyNodeId::Topic(name) => {
                jobs::readers().check(ctx).await?;
                if !could_name_a_job(name, "x") {
                    return Ok(None);
                }
                ctx.feature::<Jobs>()
                    .topic(name)
                    .await?
                    .map(|view| Topic(view).into())
            }
        })
    }
}
