// Package users owns accounts and credentials: API tokens, browser sessions
// and the active flag.
//
// Secrets are never stored: a token or session secret is 32 random bytes
// shown once, and the database keeps its SHA-256. Every authentication reads
// the user row, so deactivating a user stops every token, session and
// download link of theirs on the very next request; there is no cache to
// wait out.
package users
