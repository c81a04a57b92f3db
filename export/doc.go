// Package export turns a user's chat history into a downloadable artifact
// in S3: idempotent, snapshot-consistent, deterministic and resumable after
// a crash. docs/exports.md describes the API and what it promises; this
// package and its tests name the three promises it keeps X1 (one
// Idempotency-Key, one export), X2 (the content is fixed by the snapshot
// taken at creation) and X3 (a rerun after any crash writes the same
// bytes).
//
// # Creating an export (X1, X2)
//
// Create is keyed by the caller's Idempotency-Key: the same user, key and
// canonical body give the same export; the same key with another body is
// refused (422). The export row is the idempotency record, so a key lives
// as long as its export. In the transaction that inserts the row, Create
// reads the chat counter's committed value (the data snapshot, see package
// chat) and copies the user's membership intervals that started at or
// before it (the permission snapshot), and enqueues the job. Nothing
// written later — messages, recalls, joins, leaves — changes what the
// export contains.
//
// # Running it (X3)
//
// The worker (a jobs handler, so it is leased, heartbeated and fenced)
// first persists a shard plan: per conversation in id order, the visible
// messages in seq order, ShardSize messages per shard. Each shard is then
// rendered as JSON Lines with sorted keys and no run-time values, its
// SHA-256 and size recorded in the database and its bytes put at
// exports/<id>/shards/<n> in Snappy's framing format, in a PUT signed
// with the object's hash so that S3 refuses any other bytes. A rerun verifies each
// recorded shard against its object (decoded, or as it is when an
// earlier version stored the JSON itself) and skips it when they match;
// a missing or altered object is regenerated, and a regenerated shard
// whose hash differs from the record fails the export for good: the
// generator is not deterministic, and papering over that would break
// byte-identical reruns.
//
// The artifact, exports/<id>/export.jsonl.gz, is the shards streamed in
// order through gzip (no name, mtime 0, default level) into a multipart
// upload while hashing, so memory stays flat whatever the size. It is
// assembled while later shards are still being made, from the bytes just
// generated or verified, never read back. The stages of a run (generate,
// record, put, assemble) are pipelined; pipeline.go says how and what
// bounds them. The artifact's SHA-256, CRC32C (which the download proxy
// sends as Repr-Digest, so a client checks the artifact without a SHA-256
// of its own) and size are recorded with the state
// change to done and the export.completed outbox row in one transaction,
// which also finishes the job. Shard objects are deleted afterwards when configured.
//
// # After
//
// Get answers the state and, once done, a download link signed for
// /download/<id> (served by the download proxy). Revoke (owner or admin)
// makes an export revoked and deletes its objects. A done export is
// expired from its expires_at on, in Get, List and Artifact alike, without
// waiting for anything. A periodic sweep records expired states, deletes
// what revoked, expired and old failed exports left in the bucket, and
// fails exports whose job ran out of attempts.
package export
