// Package presign signs and verifies ferry's own download links.
//
// A link is a path plus four query fields: u (the user it was issued to),
// exp (Unix seconds), kid (the key that signed it) and sig (base64url
// HMAC-SHA256). The MAC covers a newline-delimited canonical string of the
// format version, kid, path, resource id, user and expiry, so no field can be
// changed or moved without breaking the signature.
//
// Several keys may be configured. The first one signs; every listed key
// verifies, so keys rotate without breaking live links: add the new key in
// front, wait one link lifetime, then drop the old one.
//
// A valid signature only says the link is authentic and unexpired. Whether
// the user may still read the resource is the caller's check, made on every
// request; that is what makes revocation immediate.
//
// The package uses the standard library only, and the clock is injected so
// expiry is testable.
package presign
