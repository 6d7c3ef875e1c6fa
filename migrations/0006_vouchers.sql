-- Flash-sale vouchers and their orders. `remaining` is SQL's stock: decremented by the order
-- consumer (never below zero), given back by cancellation and expiry.
CREATE TABLE vouchers (
    id                 BIGINT PRIMARY KEY,
    item_id            BIGINT NOT NULL REFERENCES items (id),
    title              TEXT   NOT NULL,
    stock              BIGINT NOT NULL,
    remaining          BIGINT NOT NULL CHECK (remaining >= 0),
    begins_at_ms       BIGINT NOT NULL,
    ends_at_ms         BIGINT NOT NULL,
    pay_within_seconds BIGINT NOT NULL,
    created_at_ms      BIGINT NOT NULL
);
CREATE INDEX vouchers_by_item ON vouchers (item_id, id);

CREATE TABLE orders (
    id            BIGINT PRIMARY KEY,
    voucher_id    BIGINT NOT NULL REFERENCES vouchers (id),
    buyer_id      BIGINT NOT NULL,
    status        TEXT   NOT NULL, -- UNPAID, PAID, CANCELLED, EXPIRED
    created_at_ms BIGINT NOT NULL,
    pay_by_ms     BIGINT NOT NULL,
    settled_at_ms BIGINT
);
CREATE INDEX orders_by_buyer ON orders (buyer_id, id);
-- One live order per person per voucher, in SQL too.
CREATE UNIQUE INDEX orders_live_per_buyer ON orders (voucher_id, buyer_id)
    WHERE status IN ('UNPAID', 'PAID');
