-- Service keys: credentials for a host app's backend, not for a person.
-- Like tokens, a key is stored as the SHA-256 of its secret. scopes is a
-- space-separated list (OAuth's spelling). A revoked key keeps its row, so
-- what it did stays attributable, but never authenticates again.
-- last_used_at is written at most once a minute per key.
CREATE TABLE service_keys (
    id           {{exact 40}} NOT NULL PRIMARY KEY,
    name         VARCHAR(64)  NOT NULL,
    hash         {{exact 64}} NOT NULL,
    scopes       VARCHAR(255) NOT NULL,
    created_at   {{ts}}       NOT NULL,
    last_used_at {{ts}}       NULL,
    revoked_at   {{ts}}       NULL,
    CONSTRAINT uq_service_keys_hash UNIQUE (hash)
) {{opts}};
