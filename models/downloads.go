package models

import "time"

// DownloadLog is one request to the download proxy; see package download.
type DownloadLog struct {
	ID          int64 `gorm:"primaryKey"`
	ResourceID  string
	UserID      string
	Method      string
	Status      int
	Code        string
	BytesSent   int64
	RangeHeader string
	RemoteAddr  string
	UserAgent   string
	LinkHash    *string
	RequestID   string
	CreatedAt   time.Time
}

// TableName keeps GORM from pluralising to "download_logs".
func (DownloadLog) TableName() string { return "download_log" }
