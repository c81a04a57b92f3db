-- Indexes for the keyset pages of the list endpoints (package page): each
-- page is one range on an index in the list's order, newest first. Files
-- already have theirs, ix_files_user (user_id, created_at, id).

-- GET /exports: (created_at, id) per user. id is spelled out because
-- SQLite, unlike InnoDB, does not append the primary key to an index.
CREATE INDEX ix_exports_user_created ON exports (user_id, created_at, id);
{{if mysql}}
DROP INDEX ix_exports_user ON exports;
{{else}}
DROP INDEX ix_exports_user;
{{end}}

-- GET /conversations: one row per user and conversation they are or ever
-- were in, with the conversation's creating gseq (unique, in creation
-- order) as the list's key. memberships has a row per interval, and the
-- order lives in conversations, so a page from those two tables meant
-- sorting all of a user's conversations. Package chat writes a row here
-- with the first membership of each user in each conversation.
CREATE TABLE user_conversations (
    user_id         {{exact 40}} NOT NULL,
    conversation_id {{exact 40}} NOT NULL,
    created_gseq    BIGINT       NOT NULL,
    PRIMARY KEY (user_id, conversation_id)
) {{opts}};
CREATE INDEX ix_user_conversations_page ON user_conversations (user_id, created_gseq);
INSERT INTO user_conversations (user_id, conversation_id, created_gseq)
    SELECT DISTINCT m.user_id, m.conversation_id, c.created_gseq
    FROM memberships m JOIN conversations c ON c.id = m.conversation_id;
