// Package web holds ferry's browser UI and its JS upload SDK, embedded in
// the binary so that `go run ./cmd/ferry` serves them without npm.
//
// src/ is the source: ferry.js is the SDK for the native upload API
// (hashing in a Web Worker with hash-wasm, proof of possession, parallel
// part PUTs with pinned Content-MD5, retries with backoff, re-signing,
// pause/resume/cancel, progress), hash-worker.js the worker, and app.js
// the UI. static/ has the page and its stylesheet. dist/ is built from
// src/ by esbuild (`npm ci && npm run build`, dependencies pinned in
// package-lock.json) and committed; CI rebuilds it and fails when it is
// out of date.
package web
