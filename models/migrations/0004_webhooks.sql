-- Webhook subscriptions, one delivery per (outbox event, subscription),
-- and every attempt to deliver it.

-- secret signs every delivery. During a rotation's grace period
-- previous_secret signs too, until previous_until; both signatures travel
-- in one webhook-signature header. Secrets are kept in clear because
-- signing needs them; protect the database accordingly. active is false
-- once a receiver answered 410 Gone.
CREATE TABLE webhook_subscriptions (
    id              VARCHAR(40)  NOT NULL PRIMARY KEY,
    url             VARCHAR(2048) NOT NULL,
    events          VARCHAR(512) NOT NULL,
    secret          VARCHAR(128) NOT NULL,
    previous_secret VARCHAR(128) NULL,
    previous_until  {{ts}}       NULL,
    active          BOOLEAN      NOT NULL DEFAULT TRUE,
    disabled_reason VARCHAR(255) NULL,
    created_at      {{ts}}       NOT NULL,
    updated_at      {{ts}}       NOT NULL
) {{opts}};

-- One row per (event, subscription): the unique key makes the fan-out
-- exactly-once even if two dispatchers raced. The webhook-id receivers see
-- is event_id, the outbox event's id, so it is the same on every attempt
-- and every redelivery, and the same for every subscriber of the event.
-- round counts admin redeliveries; each round is one job.
CREATE TABLE webhook_deliveries (
    id              VARCHAR(40)  NOT NULL PRIMARY KEY,
    subscription_id VARCHAR(40)  NOT NULL,
    event_id        VARCHAR(40)  NOT NULL,
    event_type      VARCHAR(64)  NOT NULL,
    state           VARCHAR(16)  NOT NULL,
    round           INTEGER      NOT NULL DEFAULT 1,
    attempts        INTEGER      NOT NULL DEFAULT 0,
    last_status     INTEGER      NULL,
    last_error      VARCHAR(1024) NULL,
    next_attempt_at {{ts}}       NULL,
    created_at      {{ts}}       NOT NULL,
    updated_at      {{ts}}       NOT NULL,
    delivered_at    {{ts}}       NULL,
    CONSTRAINT uq_webhook_deliveries_event_sub UNIQUE (event_id, subscription_id)
) {{opts}};
CREATE INDEX ix_webhook_deliveries_sub ON webhook_deliveries (subscription_id, created_at);
CREATE INDEX ix_webhook_deliveries_state ON webhook_deliveries (state);

-- Every HTTP attempt: when it started, the status it got (0: no
-- response), the error, and how long it took.
CREATE TABLE webhook_attempts (
    id           {{pk}},
    delivery_id  VARCHAR(40)   NOT NULL,
    round        INTEGER       NOT NULL,
    attempt      INTEGER       NOT NULL,
    started_at   {{ts}}        NOT NULL,
    status       INTEGER       NOT NULL,
    error        VARCHAR(1024) NULL,
    duration_ms  BIGINT        NOT NULL
) {{opts}};
CREATE INDEX ix_webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
