// Package server is ferry's HTTP layer: the Gin router, middleware, request
// and response types, and the one table that turns errors into statuses.
//
// Handlers are thin. Each binds and validates its request type, calls one
// domain method, and converts the result into a response type declared in
// this package; storage models never become JSON. A handler returns an
// error instead of writing one: the wrapper h() maps it through the table in
// problem.go to an RFC 9457 application/problem+json answer with a stable
// code. 5xx answers never carry internal error text; they carry the request
// id, which the log line for the same request also has.
//
// Middleware, outermost first: request id, recovery, access log and metrics,
// body-size limit, authentication (bearer token or session cookie, checked
// against the database on every request so deactivation is immediate).
package server
