// Package e2e holds ferry's end-to-end tests. They build the ferry binary,
// start it as a real process against real MariaDB (when reachable) and a
// real S3-compatible server, drive it over HTTP, signal and kill it, and
// check what landed in the bucket with minio-go, a client independent of
// ferry's own aws-sdk-go-v2 adapter.
//
// The package has no non-test code; this file exists so the directory is a
// package with a doc comment.
package e2e
