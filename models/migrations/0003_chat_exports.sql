-- Chat history (conversations, membership intervals, messages, attachments,
-- recalls, all stamped with the commit-ordered global sequence gseq) and
-- the exports made from it (the job row with its idempotency key and
-- snapshots, the permission snapshot, the shard plan with each shard's
-- SHA-256).

-- The one row every chat write updates to allocate its gseq. The row lock
-- serialises allocation with commit, so gseq order is commit order on
-- MySQL as on SQLite, and "value" is always a fully committed prefix.
CREATE TABLE chat_counter (
    id    INTEGER NOT NULL PRIMARY KEY,
    value BIGINT  NOT NULL
) {{opts}};
INSERT INTO chat_counter (id, value) VALUES (1, 0);

CREATE TABLE conversations (
    id           VARCHAR(40)  NOT NULL PRIMARY KEY,
    title        VARCHAR(200) NOT NULL,
    created_by   VARCHAR(40)  NOT NULL,
    created_gseq BIGINT       NOT NULL,
    last_seq     BIGINT       NOT NULL DEFAULT 0,
    created_at   {{ts}}       NOT NULL
) {{opts}};

-- One row per membership interval [join_gseq, leave_gseq). A user who
-- leaves and joins again has two rows; leave_gseq is NULL while the
-- interval is open.
CREATE TABLE memberships (
    id              {{pk}},
    conversation_id VARCHAR(40) NOT NULL,
    user_id         VARCHAR(40) NOT NULL,
    join_gseq       BIGINT      NOT NULL,
    leave_gseq      BIGINT      NULL,
    added_by        VARCHAR(40) NOT NULL,
    created_at      {{ts}}      NOT NULL,
    CONSTRAINT uq_memberships_join UNIQUE (conversation_id, user_id, join_gseq)
) {{opts}};
CREATE INDEX ix_memberships_user ON memberships (user_id, conversation_id, join_gseq);

-- Messages are clustered by (conversation, seq): exports and readers scan
-- one conversation in seq order.
CREATE TABLE messages (
    conversation_id VARCHAR(40) NOT NULL,
    seq             BIGINT      NOT NULL,
    gseq            BIGINT      NOT NULL,
    sender_id       VARCHAR(40) NOT NULL,
    body            TEXT        NOT NULL,
    sent_at         {{ts}}      NOT NULL,
    PRIMARY KEY (conversation_id, seq),
    CONSTRAINT uq_messages_gseq UNIQUE (gseq)
) {{opts}};
CREATE INDEX ix_messages_conv_gseq ON messages (conversation_id, gseq);

CREATE TABLE message_attachments (
    conversation_id VARCHAR(40) NOT NULL,
    seq             BIGINT      NOT NULL,
    position        INTEGER     NOT NULL,
    file_id         VARCHAR(40) NOT NULL,
    PRIMARY KEY (conversation_id, seq, position)
) {{opts}};
CREATE INDEX ix_message_attachments_file ON message_attachments (file_id);

-- A recall has its own gseq: it counts for an export only when that gseq
-- is at or before the export's snapshot.
CREATE TABLE recalls (
    conversation_id VARCHAR(40) NOT NULL,
    seq             BIGINT      NOT NULL,
    recall_gseq     BIGINT      NOT NULL,
    recalled_by     VARCHAR(40) NOT NULL,
    recalled_at     {{ts}}      NOT NULL,
    PRIMARY KEY (conversation_id, seq),
    CONSTRAINT uq_recalls_gseq UNIQUE (recall_gseq)
) {{opts}};

-- One row per export. (user_id, idempotency_key) is unique: the row is the
-- idempotency record, so keys live as long as their export does.
-- fingerprint is the SHA-256 of the canonical request body; snapshot_gseq
-- is the chat counter's committed value when the row was written.
-- shard_count is NULL until the shard plan is persisted.
CREATE TABLE exports (
    id              VARCHAR(40)  NOT NULL PRIMARY KEY,
    user_id         VARCHAR(40)  NOT NULL,
    idempotency_key VARCHAR(255) NOT NULL,
    fingerprint     CHAR(64)     NOT NULL,
    scope           VARCHAR(64)  NOT NULL,
    snapshot_gseq   BIGINT       NOT NULL,
    state           VARCHAR(16)  NOT NULL,
    shard_count     INTEGER      NULL,
    message_count   BIGINT       NULL,
    runs            INTEGER      NOT NULL DEFAULT 0,
    artifact_key    VARCHAR(255) NULL,
    sha256          CHAR(64)     NULL,
    bytes           BIGINT       NULL,
    error           TEXT         NULL,
    created_at      {{ts}}       NOT NULL,
    updated_at      {{ts}}       NOT NULL,
    started_at      {{ts}}       NULL,
    finished_at     {{ts}}       NULL,
    expires_at      {{ts}}       NULL,
    purged_at       {{ts}}       NULL,
    CONSTRAINT uq_exports_key UNIQUE (user_id, idempotency_key)
) {{opts}};
CREATE INDEX ix_exports_user ON exports (user_id, created_at);
CREATE INDEX ix_exports_state ON exports (state, expires_at);

-- The permission snapshot: each membership interval of the exporting user
-- that started at or before the snapshot. leave_gseq is NULL when the
-- interval was still open at the snapshot (a later leave does not count).
CREATE TABLE export_permissions (
    export_id       VARCHAR(40) NOT NULL,
    conversation_id VARCHAR(40) NOT NULL,
    join_gseq       BIGINT      NOT NULL,
    leave_gseq      BIGINT      NULL,
    PRIMARY KEY (export_id, conversation_id, join_gseq)
) {{opts}};

-- The shard plan: shard n holds the visible messages of one conversation
-- with first_seq <= seq <= last_seq. sha256 and bytes are recorded before
-- the shard object is written, so a rerun can tell a verified shard from a
-- missing or corrupted one, and a regenerated shard from a different one.
CREATE TABLE export_shards (
    export_id       VARCHAR(40) NOT NULL,
    n               INTEGER     NOT NULL,
    conversation_id VARCHAR(40) NOT NULL,
    first_seq       BIGINT      NOT NULL,
    last_seq        BIGINT      NOT NULL,
    messages        INTEGER     NOT NULL,
    sha256          CHAR(64)    NULL,
    bytes           BIGINT      NULL,
    PRIMARY KEY (export_id, n)
) {{opts}};
