// Package testenv gives ferry's tests real dependencies: a fresh database
// on SQLite and on MySQL/MariaDB, and a real S3-compatible server.
//
// MySQL: FERRY_TEST_MYSQL_DSN names a server (default
// root@tcp(127.0.0.1:3306)/test). Each test gets its own freshly created
// database, dropped afterwards. When the server is unreachable, MySQL
// subtests skip, unless FERRY_TEST_REQUIRE_MYSQL=1 (CI sets it), which turns
// the skip into a failure.
//
// S3: by default an embedded VersityGW started once per test process;
// FERRY_TEST_S3_ENDPOINT (+ _ACCESS_KEY, _SECRET_KEY) points the tests at
// an external S3-compatible server instead. Each test gets its own bucket.
// Starting the embedded server changes the working directory (see package
// embedded), so tests resolve their file paths before calling S3.
// .ci/s3servers builds and starts standalone SeaweedFS and VersityGW servers
// and prints these variables for them, with FERRY_TEST_S3_IMPL naming the
// implementation (s3store's capability probes compare against it).
//
// Faults: FaultProxy puts a fault proxy (package faultproxy) in front of
// any address; S3ThroughProxy and MySQLThroughProxy give a test its S3
// server or a fresh MySQL database reached only through one, so the test
// can add latency, cap bandwidth, reset, stall or refuse the connections
// the code under test makes. S3Lacking puts an HTTP proxy in front of an S3
// server that answers as stores without some capabilities do (no POST
// policies, CopyObject, CORS, lifecycle or FULL_OBJECT checksums), for the
// tests of ferry's fallbacks.
package testenv
