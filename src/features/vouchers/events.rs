//! The events of an order, XADDed to the order stream of its voucher's shard: `created` by
//! `lua/vouchers_seckill.lua`, `settled` by `lua/vouchers_settle.lua`. The order archive
//! writes them to SQL.

use crate::{
    features::vouchers::{orders::OrderStatus, NewOrder},
    infra::streams::{Event, HandleError, StreamEntry},
};

/// Something that happened to an order. Each carries the whole order: a `settled` entry
/// may be archived before its `created` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OrderEvent {
    pub(crate) order: NewOrder,
    pub(crate) buyer_id: i64,
    pub(crate) happened: OrderChange,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OrderChange {
    Created,
    /// Paid, cancelled or expired (never back to unpaid), at epoch ms.
    Settled {
        outcome: OrderStatus,
        at_ms: i64,
    },
}

impl Event for OrderEvent {
    fn from_entry(entry: &StreamEntry) -> Result<Self, HandleError> {
        let happened = match entry.field("type")? {
            "created" => OrderChange::Created,
            "settled" => {
                let status = entry.field("status")?;
                let outcome = OrderStatus::parse(status)
                    .filter(|s| *s != OrderStatus::Unpaid)
                    .ok_or_else(|| {
                        HandleError::Poison(format!("entry {}: bad status {status}", entry.id))
                    })?;
                OrderChange::Settled {
                    outcome,
                    at_ms: entry.number("at")?,
                }
            }
            other => {
                return Err(HandleError::Poison(format!(
                    "entry {}: unknown type {other}",
                    entry.id
                )))
            }
        };
        Ok(Self {
            order: NewOrder {
                order_id: entry.number("order")?,
                voucher_id: entry.number("voucher")?,
                created_at_ms: entry.number("created")?,
                pay_by_ms: entry.number("pay_by")?,
            },
            buyer_id: entry.number("buyer")?,
            happened,
        })
    }

    fn to_fields(&self) -> Vec<(&'static str, String)> {
        let mut fields = vec![(
            "type",
            match self.happened {
                OrderChange::Created => "created",
                OrderChange::Settled { .. } => "settled",
            }
            .to_string(),
        )];
        fields.extend([
            ("order", self.order.order_id.to_string()),
            ("voucher", self.order.voucher_id.to_string()),
            ("buyer", self.buyer_id.to_string()),
        ]);
        if let OrderChange::Settled { outcome, at_ms } = self.happened {
            fields.push(("status", outcome.as_str().to_string()));
            fields.push(("at", at_ms.to_string()));
        }
        fields.push(("created", self.order.created_at_ms.to_string()));
        fields.push(("pay_by", self.order.pay_by_ms.to_string()));
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_back_what_they_write() {
        let order = NewOrder {
            order_id: 1,
            voucher_id: 2,
            created_at_ms: 3,
            pay_by_ms: 4,
        };
        for happened in [
            OrderChange::Created,
            OrderChange::Settled {
                outcome: OrderStatus::Paid,
                at_ms: 5,
            },
        ] {
            let event = OrderEvent {
                order,
                buyer_id: 6,
                happened,
            };
            let entry = StreamEntry::of_event("orders", "1-0", &event);
            assert_eq!(OrderEvent::from_entry(&entry).unwrap(), event);
        }
    }
}
