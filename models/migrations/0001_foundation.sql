-- Users, their API tokens and browser sessions; the job queue every
-- background feature shares; and the outbox that notifications are read from.

CREATE TABLE users (
    id         VARCHAR(40) NOT NULL PRIMARY KEY,
    name       VARCHAR(64) NOT NULL,
    is_admin   BOOLEAN     NOT NULL DEFAULT FALSE,
    active     BOOLEAN     NOT NULL DEFAULT TRUE,
    created_at {{ts}}      NOT NULL,
    updated_at {{ts}}      NOT NULL,
    CONSTRAINT uq_users_name UNIQUE (name)
) {{opts}};

-- Tokens are stored as the SHA-256 of the secret: it has 256 bits of
-- entropy, so a slow password hash would buy nothing.
CREATE TABLE tokens (
    id           VARCHAR(40) NOT NULL PRIMARY KEY,
    user_id      VARCHAR(40) NOT NULL,
    hash         CHAR(64)    NOT NULL,
    created_at   {{ts}}      NOT NULL,
    CONSTRAINT uq_tokens_hash UNIQUE (hash)
) {{opts}};
CREATE INDEX ix_tokens_user ON tokens (user_id);

CREATE TABLE sessions (
    hash       CHAR(64)    NOT NULL PRIMARY KEY,
    user_id    VARCHAR(40) NOT NULL,
    created_at {{ts}}      NOT NULL,
    expires_at {{ts}}      NOT NULL
) {{opts}};
CREATE INDEX ix_sessions_user ON sessions (user_id);
CREATE INDEX ix_sessions_expires ON sessions (expires_at);

-- One row per unit of background work. (kind, business_key) is unique, so
-- enqueueing the same work twice is a no-op. fence grows on every claim; a
-- worker may only finish the job while fence still equals the value it
-- claimed with.
CREATE TABLE jobs (
    id           {{pk}},
    kind         VARCHAR(64)  NOT NULL,
    business_key VARCHAR(191) NOT NULL,
    payload      {{text}}     NOT NULL,
    state        VARCHAR(16)  NOT NULL,
    attempts     INTEGER      NOT NULL DEFAULT 0,
    max_attempts INTEGER      NOT NULL,
    run_at       {{ts}}       NOT NULL,
    lease_owner  VARCHAR(128) NULL,
    lease_until  {{ts}}       NULL,
    fence        BIGINT       NOT NULL DEFAULT 0,
    last_error   {{text}}     NULL,
    created_at   {{ts}}       NOT NULL,
    updated_at   {{ts}}       NOT NULL,
    finished_at  {{ts}}       NULL,
    CONSTRAINT uq_jobs_key UNIQUE (kind, business_key)
) {{opts}};
CREATE INDEX ix_jobs_due ON jobs (state, run_at);
CREATE INDEX ix_jobs_lease ON jobs (state, lease_until);

-- Events to notify, written in the same transaction as the state change
-- they describe (the transactional outbox). id is the event's notification
-- id; payload is the exact JSON body that receivers get.
CREATE TABLE outbox (
    id            VARCHAR(40) NOT NULL PRIMARY KEY,
    type          VARCHAR(64) NOT NULL,
    subject       VARCHAR(64) NOT NULL,
    user_id       VARCHAR(40) NOT NULL,
    payload       {{text}}    NOT NULL,
    created_at    {{ts}}      NOT NULL,
    dispatched_at {{ts}}      NULL
) {{opts}};
CREATE INDEX ix_outbox_pending ON outbox (dispatched_at, created_at);
CREATE INDEX ix_outbox_subject ON outbox (subject);
