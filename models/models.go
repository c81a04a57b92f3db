package models

import "time"

// User is an account. Deactivating sets Active=false; every credential of
// the user stops working on its next use, because authentication reads this
// row on every request.
//
// A host app's user, known from a JWT, has Issuer and Subject set, its id
// as Name, and the token's name claim as DisplayName.
type User struct {
	ID          string `gorm:"primaryKey"`
	Name        string
	IsAdmin     bool
	Active      bool
	Issuer      *string
	Subject     *string
	DisplayName *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Token is an API bearer token, stored as the hex SHA-256 of its secret.
type Token struct {
	ID        string `gorm:"primaryKey"`
	UserID    string
	Hash      string
	CreatedAt time.Time
}

// ServiceKey is a host app's backend credential, stored as the hex SHA-256
// of its secret. Scopes is space-separated. RevokedAt set means it no
// longer authenticates.
type ServiceKey struct {
	ID         string `gorm:"primaryKey"`
	Name       string
	Hash       string
	Scopes     string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// Session is a browser session behind an HttpOnly cookie, stored hashed.
type Session struct {
	Hash      string `gorm:"primaryKey"`
	UserID    string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// Job is one unit of background work; see package jobs.
type Job struct {
	ID          int64 `gorm:"primaryKey"`
	Kind        string
	BusinessKey string
	Payload     string
	State       string
	Attempts    int
	MaxAttempts int
	RunAt       time.Time
	LeaseOwner  *string
	LeaseUntil  *time.Time
	Fence       int64
	LastError   *string
	// OutageWaits counts consecutive runs that found a store unreachable;
	// they do not use up attempts (see jobs.Unavailable).
	OutageWaits int
	CreatedAt   time.Time
	UpdatedAt   time.Time
	FinishedAt  *time.Time
}

// OutboxEvent is a notification waiting to be delivered; see package notify.
type OutboxEvent struct {
	ID           string `gorm:"primaryKey"`
	Type         string
	Subject      string
	UserID       string
	Payload      string
	CreatedAt    time.Time
	DispatchedAt *time.Time
}

// TableName keeps GORM from pluralising to "outbox_events".
func (OutboxEvent) TableName() string { return "outbox" }
