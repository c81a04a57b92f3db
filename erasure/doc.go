// Package erasure deletes a user and everything ferry keeps of theirs: it
// is the one place that knows which domains hold a user's data, and it
// asks each to remove its part inside one database transaction.
//
// What goes, in that transaction:
//   - users: the account, its API tokens and browser sessions;
//   - upload: its files (each dropping its blob reference; a blob no file
//     of any user holds is deleted), its uploads finished or not, their
//     parts, Companion mappings, proof-of-possession challenges, upload
//     tickets for or by the user, and download grants in both directions
//     (on the user's files, to the user, and made by the user);
//   - export: its exports with their permission snapshots and shard
//     plans (the artifacts are copies of the user's data);
//   - quota: its per-user limits;
//   - notify: exactly one user.deleted event in the outbox.
//
// S3 is never called inside the transaction. Each object to delete (a
// blob no one holds, an export's shards and artifact) and each multipart
// upload to abort is a job written in the same transaction (upload.purge,
// export.erase), so S3 deletions happen if and only if the erasure
// commits, survive a crash of the process, are retried through an S3
// outage, and are idempotent. An object another user's file still holds
// (instant upload shares blobs) is kept.
//
// What stays: chat messages the user wrote remain in their conversations
// (they are the other members' history too) but their attachments that
// were the user's files no longer download; outbox events and webhook
// deliveries about the user remain until FERRY_WEBHOOK_RETENTION prunes
// them; access logs until FERRY_DOWNLOAD_LOG_RETENTION.
package erasure
