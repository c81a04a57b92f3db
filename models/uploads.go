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
	Kind        string // how it came in: upload.KindNative, KindCompanion or KindPost
	State       string
	Instant     bool
	ResumeKey   *string
	ClientETags *string `gorm:"column:client_etags"`
	// ChecksumAlgorithm is "CRC32C" when every part carries its CRC32C and
	// S3 checks FullChecksum (the client's CRC32C of the whole file) at
	// CompleteMultipartUpload; empty for uploads checked by Content-MD5 or
	// not at all.
	ChecksumAlgorithm string
	FullChecksum      *string
	Error             *string
	FileID            *string
	CreatedAt         time.Time
	UpdatedAt         time.Time
	ExpiresAt         time.Time
	FinishedAt        *time.Time

	// TicketID is the upload ticket that started the upload, if any;
	// Metadata (a JSON object) is that ticket's trusted metadata, and
	// ClientMetadata what the uploader sent at init.
	TicketID       *string
	Metadata       *string
	ClientMetadata *string
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

// Blob is content in the bucket, shared by Refs files. SHA256 is nil until
// ferry has read the object and hashed it; only blobs with a SHA256 are in
// the dedup index.
type Blob struct {
	ID     string  `gorm:"primaryKey"`
	SHA256 *string `gorm:"column:sha256"`
	Size   int64
	S3Key  string `gorm:"column:s3_key"`
	// S3ETag is the object's ETag when ferry recorded it (at completion,
	// and again when it hashed it); a different one means the object
	// changed behind ferry's back.
	S3ETag string `gorm:"column:s3_etag"`
	// HeadCRC32C is the base64 CRC32C of the object's first
	// min(Size, upload.HeadLength) bytes, recorded with SHA256 by the
	// verify job: the cheap key by which Init tells a client that its
	// content may be held.
	HeadCRC32C *string `gorm:"column:head_crc32c"`
	// CRC32C is the base64 CRC32C of the whole object, recorded with
	// SHA256 by the verify job; the download proxy sends it as
	// Repr-Digest so a client can check its bytes cheaply.
	CRC32C    *string `gorm:"column:crc32c"`
	Refs      int
	CreatedAt time.Time
	UpdatedAt time.Time
}

// File is a file a user owns.
type File struct {
	ID          string `gorm:"primaryKey"`
	UserID      string
	BlobID      string
	UploadID    string
	Name        string
	ContentType string
	Size        int64
	SHA256      string `gorm:"column:sha256"` // the uploader's claim until SHA256Verified
	// SHA256Verified is set once ferry computed SHA256 from the stored
	// bytes; until then the file reaches no one but its owner.
	SHA256Verified bool `gorm:"column:sha256_verified"`
	CreatedAt      time.Time

	// TicketID, Metadata and ClientMetadata are the upload's (see Upload).
	TicketID       *string
	Metadata       *string
	ClientMetadata *string
}

// UploadChallenge is a pending proof-of-possession challenge.
type UploadChallenge struct {
	ID          string `gorm:"primaryKey"`
	UserID      string
	BlobID      string
	FileName    string
	ContentType string
	Ranges      string // JSON [{offset,length}]
	Nonce       string // hex; every digest is SHA-256(nonce bytes || range bytes)
	CreatedAt   time.Time
	ExpiresAt   time.Time

	ClientMetadata *string // JSON object, for the file a right answer makes
}
