package models

import "time"

// Upload is one multipart upload session; see package upload.
type Upload struct {
	ID          string `gorm:"primaryKey"`
	UserID      string
	FileName    string
	ContentType string
	Size        int64
	SHA256      *string `gorm:"column:sha256"` // declared by the client, or computed at merge
	PartSize    int64
	PartCount   int
	S3Key       string `gorm:"column:s3_key"`
	S3UploadID  string `gorm:"column:s3_upload_id"`
	State       string
	Instant     bool
	ResumeKey   *string
	ClientETags *string `gorm:"column:client_etags"`
	Error       *string
	FileID      *string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	ExpiresAt   time.Time
	FinishedAt  *time.Time
}

// UploadPart is a part the client reported as uploaded.
type UploadPart struct {
	ID         int64 `gorm:"primaryKey"`
	UploadID   string
	PartNumber int
	ETag       string `gorm:"column:etag"`
	Size       int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Blob is verified content in the bucket, shared by Refs files.
type Blob struct {
	ID        string `gorm:"primaryKey"`
	SHA256    string `gorm:"column:sha256"`
	Size      int64
	S3Key     string `gorm:"column:s3_key"`
	Refs      int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// File is a verified file a user owns.
type File struct {
	ID          string `gorm:"primaryKey"`
	UserID      string
	BlobID      string
	UploadID    string
	Name        string
	ContentType string
	Size        int64
	SHA256      string `gorm:"column:sha256"`
	CreatedAt   time.Time
}

// UploadChallenge is a pending proof-of-possession challenge.
type UploadChallenge struct {
	ID          string `gorm:"primaryKey"`
	UserID      string
	BlobID      string
	FileName    string
	ContentType string
	Ranges      string // JSON [{offset,length}]
	CreatedAt   time.Time
	ExpiresAt   time.Time
}
