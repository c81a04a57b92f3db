// Package receiver is what a Go business backend imports to receive
// ferry's webhooks safely. It depends on the standard library only
// (database/sql included), not on the rest of ferry, so it is cheap to
// import.
//
// ferry signs every webhook the Standard Webhooks way: the headers
// webhook-id, webhook-timestamp (Unix seconds) and webhook-signature, which
// holds one or more space-separated "v1,<base64 HMAC-SHA256>" signatures of
// id + "." + timestamp + "." + body, keyed with the base64-decoded part of
// the "whsec_…" secret. While a secret is being rotated, ferry signs with
// every secret still in its grace period, so a receiver holding any of
// them verifies.
//
// A receiver must do four things, in this order (Handler does them):
//
//  1. Verify the signature (constant-time) and that the timestamp is within
//     five minutes of now. Anything else is dropped before its id is even
//     looked at; otherwise a forger could send a fake message with a real
//     message's id, get it recorded, and have the real one dropped as a
//     duplicate.
//  2. Claim the webhook-id. ferry retries with the same id until it gets
//     a 2xx, an attacker may replay a captured message within the
//     tolerance, and a retry may reach another replica while the first
//     copy is still being processed. The claim is one atomic step in the
//     Store: a known id answers 2xx without doing the work again, and an
//     id in progress answers 409 so the sender comes back later.
//  3. Process the message.
//  4. Mark the id done, only after processing succeeded. A failure
//     releases the claim, so ferry's next attempt is processed; a crash
//     leaves the claim to lapse after its lease (ProcessTimeout + 30 s),
//     and the next attempt after that is processed.
//
// Steps 2 to 4 do not depend on the request: once a message verified,
// Process runs on a context that ferry hanging up (after its 10 s attempt
// timeout) does not cancel, bounded by Handler.ProcessTimeout, and the
// Store calls have their own timeouts. A slow Process therefore finishes
// and is marked done, and ferry's retry is a duplicate.
//
// Usage:
//
//	v, err := receiver.NewVerifier(os.Getenv("FERRY_WEBHOOK_SECRET"))
//	...
//	http.Handle("POST /hooks/ferry", &receiver.Handler{
//		Verifier: v,
//		Store:    receiver.NewMemoryStore(24*time.Hour, nil),
//		Process: func(ctx context.Context, m *receiver.Message) error {
//			switch m.Type {
//			case "upload.completed":
//				// decode m.Data, check it against storage, start work
//			}
//			return nil
//		},
//	})
//
// MemoryStore suits one process. Backends with several replicas share
// SQLStore, a database/sql table created with CreateTableSQL (SQLite,
// PostgreSQL) or CreateTableMySQL (MySQL, MariaDB):
//
//	CREATE TABLE webhook_receipts (
//	    webhook_id  VARCHAR(255) NOT NULL PRIMARY KEY, -- VARBINARY(255) on MySQL/MariaDB
//	    received_at BIGINT       NOT NULL,
//	    claim_token VARCHAR(64)  NULL,
//	    lease_until BIGINT       NULL
//	);
//	CREATE INDEX ix_webhook_receipts_received ON webhook_receipts (received_at);
//
// On MySQL and MariaDB the id must be VARBINARY (or use a NO PAD binary
// collation): their usual collations pad with spaces or ignore case, so
// "evt_x " would equal "evt_x". SQLStore notices such a table and fails
// with ErrInexactIDs instead of dropping a message. Ids longer than
// MaxIDBytes (255) are refused with ErrIDTooLong.
//
// A table made for an earlier version (webhook_id and received_at only)
// needs the two new columns, and on MySQL/MariaDB the VARBINARY id:
//
//	ALTER TABLE webhook_receipts ADD COLUMN claim_token VARCHAR(64) NULL;
//	ALTER TABLE webhook_receipts ADD COLUMN lease_until BIGINT NULL;
//	ALTER TABLE webhook_receipts MODIFY webhook_id VARBINARY(255) NOT NULL; -- MySQL/MariaDB
//
// received_at is Unix seconds; SQLStore.Purge deletes old rows. Keep ids
// at least as long as ferry may still retry (about 70 minutes with the
// default schedule) and longer if operators redeliver by hand: a
// redelivered message keeps its id, and one whose id was purged is
// processed again. Neither store keeps ids for less than MinRetention
// (twice the timestamp tolerance), which is how long a replay of a
// captured message still verifies.
//
// Compatibility: Store is now Claim, Done and Release instead of Seen and
// Record, which could not stop two copies of a message from both being
// processed. MemoryStore and SQLStore keep Seen and Record for code that
// calls them directly.
package receiver
