-- Users of a host app, known by their JWT's (iss, sub). issuer and subject
-- are NULL for ferry's own users; both engines let NULLs repeat in a
-- unique index, so the index holds for external users only, and two
-- replicas seeing a new user at once create one row. Such a user's name
-- (unique, the handle ferry's own users sign in by) is its id; the name
-- claim goes to display_name, which needs not be unique.
ALTER TABLE users ADD COLUMN issuer {{exact 255}} NULL;
ALTER TABLE users ADD COLUMN subject {{exact 255}} NULL;
ALTER TABLE users ADD COLUMN display_name VARCHAR(255) NULL;
CREATE UNIQUE INDEX uq_users_identity ON users (issuer, subject);
