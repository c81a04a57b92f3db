// Package strictjson decodes request bodies whose every byte should mean
// exactly one thing.
//
// encoding/json is lenient where a body is an identity: an idempotency
// fingerprint, a message that is stored and exported. It matches member
// names without regard to case ({"SCOPE":"all"} fills Scope), lets the
// last of two equal names win ({"scope":"conv:x","scope":"all"} is "all"
// to Go and may be "conv:x" to a proxy or a log reader), and replaces
// invalid UTF-8 and escaped lone surrogates ("\ud800") with U+FFFD
// without a word. Decode refuses all three, then decodes with
// encoding/json (unknown fields refused), so a body it accepts decodes the
// same everywhere.
package strictjson
