package models

import "time"

// CompanionUpload maps the S3 UploadId a Companion client (Uppy) names an
// upload by to the upload and its owner; see package upload.
type CompanionUpload struct {
	S3UploadHash string `gorm:"column:s3_upload_hash;primaryKey"`
	UploadID     string
	UserID       string
	CreatedAt    time.Time
}
