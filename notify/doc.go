// Package notify tells business backends about finished work through
// signed webhooks.
//
// It starts with the transactional outbox: domain packages call Emit inside
// the same database transaction as the state change an event describes, so
// an event exists if and only if the change committed, and each change
// produces exactly one event id. Delivery reads the outbox afterwards.
package notify
