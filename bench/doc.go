// Command bench measures ferry's data paths side by side with the paths it
// competes with, on one random file and one S3 server, in one run:
//
//   - ferry upload: the real `ferry upload` CLI through a running
//     `ferry serve` (SQLite, or MySQL with -mysql); the bytes go from the
//     client straight to S3 through presigned part URLs;
//   - the raw aws-sdk-go-v2 multipart upload straight to S3 with the same
//     part size and concurrency: the ceiling; and the same again with the
//     Content-MD5 that ferry's part URLs require, to price that check;
//   - tusd v2 with its S3 store, where every byte passes through tusd;
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
// server's CPU seconds (utime+stime from /proc/<pid>/stat) and bytes read
// (rchar from /proc/<pid>/io) per GiB, plus the server's own Prometheus
// counters, and the client's and VersityGW's CPU. The ferry CLI's runs are
// split where its --json progress changes phase, so the upload's control
// plane (init, presign, part reports, complete) is told apart from the
// merge's read-back verification.
//
// It prints a markdown table and writes results.json, results.md (with the
// machine described and the three targets compared) and chart.png into
// -out. See bench/README.md.
//
// The package has no tests on purpose: it is a program that takes minutes
// and a GiB of disk, not something `go test ./...` should run.
package main
