// Command ferry moves large files in and out of object storage.
//
// Server commands, which read their settings from FERRY_* environment
// variables (see .env.example):
//
//	ferry serve                     run the API server and background workers
//	ferry migrate                   apply database migrations and exit
//	ferry healthcheck [--live] [--timeout D]
//	                                exit 0 if the ferry on FERRY_ADDR is ready (GET /readyz), 1 if not
//	ferry doctor [--timeout D]      check the database, bucket, CORS, public endpoint, clock, link keys and webhooks; exit 1 naming the setting to change
//	ferry user create NAME [--admin]
//	                                create a user and print its API token
//	ferry user delete ID            erase a user: files, uploads, exports, credentials and grants (one user.deleted webhook)
//	ferry user rotate-token ID      give a user a new API token; the old ones stop working
//	ferry service-key create NAME --scope SCOPE [--scope SCOPE…]
//	                                create a service key for a backend and print it
//	ferry service-key list          list service keys with their scopes and last use
//	ferry service-key revoke ID     revoke a service key at once
//	ferry demo seed [--users N] [--conversations N] [--messages N] [--seed S] [--prefix NAME]
//	                                fill the database with synthetic users and chat history
//	ferry version                   print the version
//	ferry help [COMMAND]            describe every command, or one
//
// Client commands, which talk to a ferry server like a browser would; each
// also takes --json, --quiet, --server URL and --token TOKEN (the server and
// token default to $FERRY_URL and $FERRY_TOKEN):
//
//	ferry upload [--concurrency N] [--type CONTENT-TYPE] [--ticket TICKET] [--meta KEY=VALUE]... [--no-instant] FILE...
//	                                upload files (resumes an interrupted upload of the same content)
//	ferry download [--sha256] URL -o FILE
//	                                download a ferry link, resuming a partial FILE
//	ferry export [--scope all|conv:ID] -o FILE [--new]
//	                                export your chat history and download it
//
// "ferry COMMAND -h" (or --help, or "ferry help COMMAND") prints a command's
// usage and flags and exits 0. The table in commands.go is what the binary
// dispatches and what "ferry help" prints; a test keeps this list in step
// with it.
//
// With no setting, `ferry serve` stores everything under ./ferry-data: a
// SQLite database and an embedded S3-compatible server.
//
// This package only wires things together; the behaviour lives in the
// packages it imports.
package main
