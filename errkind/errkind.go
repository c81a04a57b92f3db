package errkind

import (
	"errors"
	"fmt"
	"slices"
)

// Kind is a sentinel error naming a class of failure.
type Kind struct{ name string }

func (k *Kind) Error() string { return k.name }

// The kinds ferry distinguishes. Each maps to one HTTP status in package
// server; domain code never chooses a status itself.
var (
	// Invalid: the request is malformed or violates a limit (400).
	Invalid = newKind("invalid")
	// Unauthenticated: no or bad credentials (401).
	Unauthenticated = newKind("unauthenticated")
	// Forbidden: credentials are fine but the act is not allowed (403).
	Forbidden = newKind("forbidden")
	// NotFound: missing, or not visible to the caller (404).
	NotFound = newKind("not found")
	// Conflict: the resource's state does not allow the act (409).
	Conflict = newKind("conflict")
	// Gone: the resource existed but was revoked or expired (410).
	Gone = newKind("gone")
	// PreconditionFailed: a conditional request did not hold (412).
	PreconditionFailed = newKind("precondition failed")
	// RangeNotSatisfiable: no requested byte range overlaps the
	// representation, or the range set is malformed (416).
	RangeNotSatisfiable = newKind("range not satisfiable")
	// TooLarge: a body or value exceeds a configured size (413).
	TooLarge = newKind("too large")
	// UnsupportedMediaType: the body is not in a format the endpoint
	// takes, such as a form post to a JSON endpoint (415).
	UnsupportedMediaType = newKind("unsupported media type")
	// Unprocessable: well-formed but semantically refused, such as an
	// idempotency key reused with another body (422).
	Unprocessable = newKind("unprocessable")
	// TooManyRequests: a per-user or per-client limit is reached (429).
	TooManyRequests = newKind("too many requests")
	// Unavailable: a dependency is down; retrying later may work (503).
	Unavailable = newKind("unavailable")
)

// Error is a classified error with a stable machine-readable code, a
// human-readable detail that is safe to show the client, and optional
// extension fields (RFC 9457 extension members such as missing_parts).
type Error struct {
	Kind   *Kind
	Code   string
	Detail string
	Fields map[string]any
	Err    error // an underlying cause, never shown to clients
}

func (e *Error) Error() string {
	msg := e.Code
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap lets errors.Is match both the Kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// New returns an *Error of kind k with a code and a client-safe detail.
func New(k *Kind, code, format string, args ...any) *Error {
	return &Error{Kind: k, Code: code, Detail: fmt.Sprintf(format, args...)}
}

// With returns a copy of e with an extension field added.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Fields = make(map[string]any, len(e.Fields)+1)
	for k, v := range e.Fields {
		c.Fields[k] = v
	}
	c.Fields[key] = value
	return &c
}

// Invalidf is shorthand for a 400-class error with the given code.
func Invalidf(code, format string, args ...any) *Error {
	return New(Invalid, code, format, args...)
}

// KindOf reports the Kind err carries, or nil when it carries none.
func KindOf(err error) *Kind {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

// Kinds returns every kind, in declaration order: the one list KindOf
// searches and the HTTP layer's status table is checked against.
func Kinds() []*Kind { return slices.Clone(kinds) }

// kinds is every Kind, appended to as each is declared.
var kinds []*Kind

func newKind(name string) *Kind {
	k := &Kind{name}
	kinds = append(kinds, k)
	return k
}
