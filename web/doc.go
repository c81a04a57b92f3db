// Package web holds ferry's browser UI and its JS upload SDK, embedded in
// the binary so that `go run ./cmd/ferry` serves them without npm.
//
// src/ is the source: ferry.js is the SDK for the native upload API
// (one read of the file in Web Workers with hash-wasm that gives each
// part's CRC32C as the part is read and the whole file's CRC32C and
// SHA-256 at the end, the SHA-256 of a file up to 16 MiB from WebCrypto
// where the page has it; workers started ahead of the first upload by
// Ferry.warm; parallel part PUTs with the CRC32C signed in, or
// Content-MD5 on stores without checksums; resume by the first part's
// CRC32C; the SHA-256 declared mid-transfer for instant upload and proof
// of possession; retries with backoff, re-signing, pause/resume/cancel,
// progress, and a long poll for the end), hash-worker.js the workers, and
// app.js the UI. static/ has the page and its stylesheet. dist/ is built
// from src/ by esbuild (`npm ci && npm run build`, dependencies pinned in
// package-lock.json) and committed; CI rebuilds it and fails when it is
// out of date.
package web
