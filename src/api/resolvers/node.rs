//! `node`, `nodes`: any object by its global id (the Relay Global Object Identification
//! specification).

use async_graphql::{Context, Object, ID};

use crate::{
    api::schema::{
        id::AnyNodeId,
        node::{self, Node, MAX_NODES},
        page::list_cost,
    },
    infra::error::{AppError, AppResult},
};

#[derive(Default)]
pub(crate) struct NodeQuery;

#[Object]
impl NodeQuery {
    /// The object with this global id, as its own query answers it: null when none, or
    /// one the viewer may not see (another buyer's order); a job needs the role `job`
    /// needs, and answers its error without it.
    async fn node(&self, ctx: &Context<'_>, id: ID) -> async_graphql::Result<Option<Node>> {
        let mut found = node::load(ctx, &[AnyNodeId::decode(&id)]).await?;
        found.pop().unwrap_or(Ok(None))
    }

    /// The objects with these global ids (at most 100), in their order, each as `node`
    /// answers it; a job the viewer may not read is null, with `job`'s error at its index.
    // Priced as the list it answers; past the limit it is refused with BAD_USER_INPUT,
    // so the price stops growing there.
    #[graphql(complexity = "list_cost(ids.len().min(MAX_NODES), child_complexity)")]
    async fn nodes(
        &self,
        ctx: &Context<'_>,
        ids: Vec<ID>,
    ) -> AppResult<Vec<Option<async_graphql::Result<Node>>>> {
        if ids.len() > MAX_NODES {
            return Err(AppError::bad_input(format!(
                "nodes takes at most {MAX_NODES} ids, got {}",
                ids.len()
            )));
        }
        let ids: Vec<_> = ids.iter().map(|id| AnyNodeId::decode(id)).collect();
        // An error is the one node's (at its index), as `Option` answers it with null.
        Ok(node::load(ctx, &ids)
            .await?
            .into_iter()
            .map(Result::transpose)
            .collect())
    }
}
