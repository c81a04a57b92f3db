// Package e2e holds ferry's end-to-end tests. They build the ferry binary,
// start it as a real process against real MariaDB (when reachable) and a
// real S3-compatible server, drive it over HTTP, signal and kill it, and
// check what landed in the bucket with minio-go, a client independent of
// ferry's own aws-sdk-go-v2 adapter.
//
// ferry runs on its embedded S3 server unless FERRY_TEST_S3_ENDPOINT names
// an external one (see internal/testenv): then every ferry a test starts
// uses that server, each on a fresh bucket, except where a test picks its
// S3 itself. Options.S3 starts ferry on a given server, such as one behind
// a fault proxy (internal/faultproxy).
//
// The multi-replica suite (cluster_test.go, replicas_test.go) starts three
// ferry processes on one MariaDB database and one bucket, spreads every
// flow over them and kills them mid-work; each replica may reach S3
// through an HTTP proxy that holds chosen requests, so a kill lands while
// a merge or an export waits on S3. It runs with FERRY_TEST_REPLICAS=1,
// and TestReplicaCapacity, a measurement, with
// FERRY_TEST_REPLICA_CAPACITY=1; .ci/replicas runs both.
//
// Every exchange a test has with ferry through Ferry.Do, Ferry.HTTP or
// Ferry.Client is validated against server/openapi.yaml
// (contract_test.go): an answer the document does not describe fails the
// test that asked.
//
// example_test.go builds examples/backend, the host app of
// docs/integrate.md, and runs it as a process beside ferry, as a team
// copying it would.
//
// TestDocs (docs_test.go) runs every shell block of the repository's Markdown
// with bash against a fresh ferry per file, so the documented commands are
// tested as a reader types them; CONTRIBUTING.md lists the rules a block
// follows, and TestDocRunner holds the runner to them.
//
// The package has no non-test code; this file exists so the directory is a
// package with a doc comment.
package e2e
