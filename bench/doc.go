// Command bench measures ferry's data paths side by side with the paths it
// competes with, on one random file and one S3 server, in one run:
//
//   - ferry upload: the real `ferry upload` CLI through a running
//     `ferry serve` (SQLite, or MySQL with -mysql); the bytes go from the
//     client straight to S3 through presigned part URLs;
//   - the raw aws-sdk-go-v2 multipart upload straight to S3 with the same
//     part size and concurrency: the ceiling; the same with a CRC32C per
//     part and a full-object CRC32C checked at complete, the integrity
//     ferry's checksummed uploads carry (the second ceiling); and the same
//     with the Content-MD5 of ferry's older part URLs;
//   - tusd v2 with its S3 store, where every byte passes through tusd;
//   - `aws s3 cp`, when the AWS CLI is on PATH, with the same part size
//     and concurrency;
//   - `ferry download` through ferry's download proxy, against a direct S3
//     GET of the same object.
//
// Run it from the repository root:
//
//	go run ./bench -size 1GiB -out bench/results
//
// It prepares every peer itself: it builds ferry from this checkout,
// installs the standalone VersityGW and tusd binaries into a cache directory
// (not into go.mod), starts them on loopback ports, and stops them at the
// end. ferry is pointed at the standalone VersityGW, never its embedded S3,
// so the S3 server's CPU is not counted as ferry's.
//
// For each case it records the wall time, the throughput, and the API
// server's CPU seconds (its threads' time from /proc/<pid>/task/*/schedstat,
// in nanoseconds) and bytes read (rchar from /proc/<pid>/io) per GiB, plus
// the server's own Prometheus counters, and the client's and VersityGW's
// CPU. The ferry CLI's runs are split at its first part PUT, at the last
// part PUT answered, at its success line, which comes when ferry records
// success (S3's CompleteMultipartUpload, timed in the raw SDK runs, is the
// yardstick for that wait) and at the end of the background SHA-256, so
// the control plane's CPU is told apart from the verify job's.
//
// It prints a markdown table and writes results.json, results.md (with the
// machine described and issue 12's targets compared) and chart.png into
// -out. See bench/README.md.
//
// The package has no tests on purpose: it is a program that takes minutes
// and a GiB of disk, not something `go test ./...` should run.
package main
