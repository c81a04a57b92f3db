package models

import "time"

// UploadTicket lets the holder of its secret (stored as the hex SHA-256)
// make one upload as UserID, within MaxSize and ContentTypes, with the
// trusted Metadata; see package upload. UploadID is set by the init that
// uses it.
type UploadTicket struct {
	ID           string `gorm:"primaryKey"`
	Hash         string
	UserID       string
	CreatedBy    string
	Metadata     *string // JSON object
	MaxSize      int64   // 0: no limit of its own
	ContentTypes *string // JSON array of media types or type/*; nil: any
	UploadID     *string
	CreatedAt    time.Time
	ExpiresAt    time.Time
	UsedAt       *time.Time
}

// DownloadGrant lets UserID download FileID through the proxy until it
// expires (ExpiresAt nil: never) or is revoked.
type DownloadGrant struct {
	ID        string `gorm:"primaryKey"`
	FileID    string
	UserID    string
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// UserQuota overrides the configured quotas for one user; a nil field
// takes the setting, and 0 is unlimited.
type UserQuota struct {
	UserID        string `gorm:"primaryKey"`
	Bytes         *int64
	ExportsPerDay *int
	UpdatedAt     time.Time
}

// TableName names the table plainly: GORM's inflection spells the plural
// of "quota" as "quota".
func (UserQuota) TableName() string { return "user_quotas" }
