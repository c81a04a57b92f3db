package models

import "time"

// Export is one chat-history export and its idempotency record.
type Export struct {
	ID             string `gorm:"primaryKey"`
	UserID         string
	IdempotencyKey string
	Fingerprint    string
	Scope          string
	SnapshotGseq   int64
	State          string
	ShardCount     *int
	MessageCount   *int64
	Runs           int
	ArtifactKey    *string
	SHA256         *string `gorm:"column:sha256"`
	CRC32C         *string `gorm:"column:crc32c"` // base64; nil for exports done before it was recorded
	Bytes          *int64
	Error          *string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
	ExpiresAt      *time.Time
	PurgedAt       *time.Time
}

// ExportPermission is one membership interval in an export's permission
// snapshot. LeaveGseq is nil when the interval was open at the snapshot.
type ExportPermission struct {
	ExportID       string `gorm:"primaryKey"`
	ConversationID string `gorm:"primaryKey"`
	JoinGseq       int64  `gorm:"primaryKey"`
	LeaveGseq      *int64
}

// ExportShard is one entry of an export's shard plan and, once written,
// the SHA-256 and size of its JSON (its object holds that JSON as a
// Snappy-framed, or as it is when an earlier version wrote it).
type ExportShard struct {
	ExportID       string `gorm:"primaryKey"`
	N              int    `gorm:"primaryKey;column:n"`
	ConversationID string
	FirstSeq       int64
	LastSeq        int64
	Messages       int
	SHA256         *string `gorm:"column:sha256"`
	Bytes          *int64
}
