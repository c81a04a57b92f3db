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
// both the old and the new one, so a receiver holding either verifies.
//
// A receiver must do four things, in this order (Handler does them):
//
//  1. Verify the signature (constant-time) and that the timestamp is within
//     five minutes of now. Anything else is dropped before its id is even
//     looked at; otherwise a forger could send a fake message with a real
//     message's id, get it recorded, and have the real one dropped as a
//     duplicate.
//  2. Deduplicate on webhook-id. ferry retries with the same id until it
//     gets a 2xx, and an attacker may replay a captured message within the
//     tolerance; a known id answers 2xx without doing the work again.
//  3. Process the message.
//  4. Record the id, only after processing succeeded, so a failure leaves
//     it unrecorded and ferry's next attempt is processed.
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
// SQLStore, a database/sql table created with:
//
//	CREATE TABLE webhook_receipts (
//	    webhook_id  VARCHAR(255) NOT NULL PRIMARY KEY,
//	    received_at BIGINT       NOT NULL
//	);
//	CREATE INDEX ix_webhook_receipts_received ON webhook_receipts (received_at);
//
// received_at is Unix seconds; SQLStore.Purge deletes old rows. Keep ids
// at least as long as ferry may still retry (about 70 minutes with the
// default schedule) and longer if operators redeliver by hand: a
// redelivered message keeps its id, and one whose id was purged is
// processed again.
//
// Across replicas, two copies of one id arriving at the same moment can
// both pass step 2 (Handler serialises them only within a process), so
// Process should still be idempotent; the store makes duplicates rare, not
// impossible.
package receiver
