//! Commands that span slots: pipelines whose commands live in different slots (a page of
//! remarks reads every like shard) and multi-key commands such as MGET.

use futures::future::try_join_all;
use redis::{Cmd, Pipeline, RedisError, RedisResult, Value};

use super::{
    routes::{route_of, Join, Part, Route},
    unexpected, Cluster, Next, Reply, Request,
};

impl Cluster {
    /// Sends the parts of a command split per slot, and joins their replies.
    pub(super) async fn query_split(&self, join: Join, parts: Vec<Part>) -> RedisResult<Value> {
        let replies = try_join_all(parts.iter().map(|(cmd, _)| self.query(cmd))).await?;
        match join {
            Join::Sum => {
                let mut sum = 0;
                for reply in replies {
                    sum += redis::from_redis_value::<i64>(reply)?;
                }
                Ok(Value::Int(sum))
            }
            Join::Values => {
                let keys = parts.iter().map(|(_, at)| at.len()).sum();
                let mut values = vec![Value::Nil; keys];
                for (reply, (_, at)) in replies.into_iter().zip(&parts) {
                    let Value::Array(part) = reply else {
                        return Err(unexpected("MGET answered with no array"));
                    };
                    for (value, &index) in part.into_iter().zip(at) {
                        values[index] = value;
                    }
                }
                Ok(Value::Array(values))
            }
        }
    }

    /// Sends a pipeline: a transaction as a whole to its slot's master (it must stay
    /// whole), any other one pipeline per slot, at the same time. The replies come back in
    /// the order of the commands.
    pub(super) async fn query_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let slots: Vec<Option<u16>> = pipeline
            .cmd_iter()
            .map(|cmd| match route_of(cmd) {
                Route::Slot(slot) => Some(slot),
                Route::AnyMaster | Route::AllMasters => None,
            })
            .collect();
        if pipeline.is_transaction() {
            let slot = slots.iter().find_map(|slot| *slot);
            let request = Request::Many(pipeline, offset, count);
            return match self.send_to_slot(slot, request, None).await? {
                Reply::Many(replies) => Ok(replies),
                Reply::One(value) => Ok(vec![value]),
            };
        }
        let mut parts: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for (index, slot) in slots.iter().enumerate() {
            match parts.iter_mut().find(|(s, _)| s == slot) {
                Some((_, indices)) => indices.push(index),
                None => parts.push((*slot, vec![index])),
            }
        }
        let commands: Vec<&Cmd> = pipeline.cmd_iter().collect();
        let sent = parts.iter().map(|(slot, indices)| {
            let part: Vec<&Cmd> = indices.iter().map(|&i| commands[i]).collect();
            self.send_part(*slot, part)
        });
        let mut replies = vec![Value::Nil; slots.len()];
        for (part, (_, indices)) in try_join_all(sent).await?.into_iter().zip(&parts) {
            for (reply, &index) in part.into_iter().zip(indices) {
                replies[index] = reply;
            }
        }
        Ok(replies.into_iter().skip(offset).take(count).collect())
    }

    /// The commands of one slot, pipelined to its master. A command answered with a
    /// redirection or a retryable error (during a migration, only some keys of a slot have
    /// moved) is sent again on its own.
    pub(super) async fn send_part(
        &self,
        slot: Option<u16>,
        commands: Vec<&Cmd>,
    ) -> RedisResult<Vec<Value>> {
        let mut part = redis::pipe();
        for cmd in &commands {
            part.add_command((*cmd).clone());
        }
        let replies = match self
            .send_to_slot(slot, Request::Many(&part, 0, commands.len()), None)
            .await?
        {
            Reply::Many(replies) => replies,
            Reply::One(value) => vec![value],
        };
        let addr = self.master_of(slot).unwrap_or_default();
        let again = replies.into_iter().zip(commands).map(|(reply, cmd)| {
            let next = match &reply {
                Value::ServerError(error) => {
                    match self.next_after(&RedisError::from(error.clone()), &addr) {
                        Next::Fail => None,
                        next => Some(next),
                    }
                }
                _ => None,
            };
            async move {
                let Some(next) = next else { return Ok(reply) };
                match self.send_to_slot(slot, Request::One(cmd), Some(next)).await {
                    Ok(Reply::One(value)) => Ok(value),
                    Ok(Reply::Many(_)) => Err(unexpected("one command answered with many replies")),
                    // A server's answer takes its place among the replies; anything else
                    // (a lost connection) fails the pipeline, as it would fail the command.
                    Err(error) => match error.clone().into_server_errors() {
                        Some(errors) if errors.len() == 1 => {
                            Ok(Value::ServerError(errors[0].1.clone()))
                        }
                        _ => Err(error),
                    },
                }
            }
        });
        try_join_all(again).await
    }
}
