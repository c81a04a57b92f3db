-- The download log: one row per request to /download/{id}, whatever its
-- outcome, for audit and for spotting forwarded links.
--
-- link_hash is the hex SHA-256 of the link's signature, set only when the
-- signature verified. Counting the distinct remote_addr of one link_hash
-- finds a link used from several places; the database sees every replica's
-- requests, so the count is right however a load balancer spreads them.
-- range_header is the Range field as received (clipped), code the stable
-- error code of a refused request ('' when served).
CREATE TABLE download_log (
    id           {{pk}},
    resource_id  VARCHAR(64)  NOT NULL,
    user_id      VARCHAR(40)  NOT NULL,
    method       VARCHAR(8)   NOT NULL,
    status       INTEGER      NOT NULL,
    code         VARCHAR(64)  NOT NULL,
    bytes_sent   BIGINT       NOT NULL,
    range_header VARCHAR(255) NOT NULL,
    remote_addr  VARCHAR(64)  NOT NULL,
    user_agent   VARCHAR(255) NOT NULL,
    link_hash    CHAR(64)     NULL,
    request_id   VARCHAR(64)  NOT NULL,
    created_at   {{ts}}       NOT NULL
) {{opts}};
CREATE INDEX ix_download_log_resource ON download_log (resource_id, created_at);
CREATE INDEX ix_download_log_user ON download_log (user_id, created_at);
CREATE INDEX ix_download_log_link ON download_log (link_hash, remote_addr);
CREATE INDEX ix_download_log_created ON download_log (created_at);
