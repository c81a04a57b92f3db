// Package chat owns ferry's chat history: conversations, membership
// intervals, messages with their attachments, and recalls. It is the data
// that exports are made from.
//
// # The global sequence
//
// Every chat write (creating a conversation, a join, a leave, a message, a
// recall) gets a gseq from one counter row, updated inside the write's own
// transaction. The row lock is held until commit, so writes that allocate
// gseqs are serialised and a smaller gseq always commits before a larger
// one, on MySQL as on SQLite. Snapshot reads the counter's committed value
// S; every write with gseq <= S has then committed and every later write
// gets a gseq > S. That makes "everything with gseq <= S" a stable,
// re-readable snapshot: the property exports rely on (X2 in package
// export; docs/exports.md, "What is in it"). A
// plain AUTO_INCREMENT or max(gseq) would not do, because on a multi-writer
// database a transaction can take a smaller number and commit after one
// with a larger number has been read.
//
// The price is that chat writes are serialised on that row; each holds it
// for one short transaction.
//
// A message's seq (its place in the conversation) is taken from the
// conversation's row in the same transaction, so within a conversation
// seq and gseq grow together: ordering a conversation's messages by gseq
// orders them by seq. A whole-conversation scan relies on this to walk the
// small (conversation_id, gseq) index rather than the primary key, whose
// leaves carry every body.
//
// # Visibility
//
// A user sees a conversation's messages only inside their membership
// intervals [join gseq, leave gseq); leaving and joining again makes a new
// interval. A recalled message keeps its place but shows an empty body, no
// attachments and recalled=true. The read API shows what the caller can
// see now; ReadMessages with Range.AsOf shows what they could see at a
// snapshot, which is what exports use, reading through the intervals the
// export copied (StoredIntervals) instead of the live ones.
//
// Any number of intervals works: a reader's intervals in a conversation
// are read once and each message is checked against them by binary
// search, while the messages are read in seq order off their primary key.
// The SQL does not grow with the intervals (one OR term per interval made
// SQLite refuse a reader with about 1,000 of them).
//
// # Lists
//
// Conversations pages a user's conversations newest first by the gseq that
// created each (package page). memberships has one row per interval, so
// the list has its own table, user_conversations: one row per user and
// conversation they were ever in, written with their first membership of
// it by every writer of memberships (CreateConversation, AddMember, Seed).
//
// Attachments name files the sender owns. Files belong to the uploads
// feature; this package asks its Files interface whether the ids are the
// sender's and stores only the ids.
package chat
