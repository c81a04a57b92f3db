package main

import (
	"github.com/ferry-io/ferry/download"
	"github.com/ferry-io/ferry/export"
	"github.com/ferry-io/ferry/s3store"
	"github.com/ferry-io/ferry/upload"
)

// The S3 adapter is what every domain's storage seam is cut to; these fail
// the build, not a request, when one of them drifts from it.
var (
	_ upload.Storage   = (*s3store.Store)(nil)
	_ export.Storage   = (*s3store.Store)(nil)
	_ download.Storage = (*s3store.Store)(nil)
)
