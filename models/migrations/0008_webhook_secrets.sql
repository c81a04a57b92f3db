-- Secrets a rotation took out of service. Each keeps signing beside the
-- current secret until its own expires_at: a subscription used to hold a
-- single previous secret, so a second rotation dropped the first old
-- secret at once although that rotation had promised it a grace period.
CREATE TABLE webhook_secrets (
    id              {{pk}},
    subscription_id VARCHAR(40)  NOT NULL,
    secret          VARCHAR(128) NOT NULL,
    expires_at      {{ts}}       NOT NULL,
    created_at      {{ts}}       NOT NULL
) {{opts}};
CREATE INDEX ix_webhook_secrets_sub ON webhook_secrets (subscription_id, expires_at);

INSERT INTO webhook_secrets (subscription_id, secret, expires_at, created_at)
    SELECT id, previous_secret, previous_until, updated_at FROM webhook_subscriptions
    WHERE previous_secret IS NOT NULL AND previous_until IS NOT NULL;
ALTER TABLE webhook_subscriptions DROP COLUMN previous_secret;
ALTER TABLE webhook_subscriptions DROP COLUMN previous_until;
