// Package users owns accounts and credentials: API tokens, browser sessions,
// the active flag, a host app's users (from its JWTs), and service keys for
// its backend.
//
// Secrets are never stored: a token, session secret or service key is 32
// random bytes shown once, and the database keeps its SHA-256. Every
// authentication reads the user row (or the key's), so deactivating a user
// stops every token, session and download link of theirs, and revoking a
// key stops it, on the very next request; there is no cache to wait out.
//
// A host app's users arrive with its JWTs. JWTVerifier checks a token
// (golang-jwt, with the JWK Set fetched and cached by keyfunc/jwkset) and
// yields an Identity without touching the database; External turns that
// into the ferry user for (issuer, subject), created on first sight. The
// unique index on (issuer, subject) makes replicas racing there create one
// user, and the user row is read on every request, so deactivation stops
// their JWTs at once.
//
// A service key (fsk_…) is no user. It holds scopes (Scopes lists them),
// and the HTTP layer lets it call only the routes those scopes open.
package users
