// Command ferry moves large files in and out of object storage.
//
//	ferry serve                  run the API server and background workers
//	ferry migrate                apply database migrations and exit
//	ferry user create NAME       create a user and print its token (--admin for an administrator)
//	ferry version                print the version
//
// Settings come from FERRY_* environment variables; see .env.example. With
// none set, `ferry serve` stores everything under ./ferry-data: a SQLite
// database and an embedded S3-compatible server.
//
// This package only wires things together; the behaviour lives in the
// packages it imports.
package main
