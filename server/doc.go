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
// Middleware, outermost first: request id, profile labels (the route and
// method on the request's goroutine, for CPU profiles), recovery, access log
// and metrics, security headers, body-size limit, authentication (bearer
// token, service key, a host app's JWT, upload ticket or session cookie,
// checked against the database on every request so deactivation and
// revocation are immediate; a cookie on a write must come from ferry's
// origin, see auth.go). An upload ticket (tickets.go) makes the caller the
// ticket's user on the upload routes of the ticket's one upload only
// (ticketRoutes; every other route answers 403 ticket_not_allowed); Uppy 6,
// which sends no headers, carries it in the path of the Companion routes
// (/tickets/{ticket}/s3/…), which the access log redacts. The native JSON
// API (cors.go) answers CORS for ferry's origins without credentials, and a
// session cookie sent from another origin is refused there; the Companion
// routes answer CORS with credentials. Each route group has a guard saying
// who may call it: requireUser, requireAdmin, or for routes a service key
// may call, requireScope, userOrScope and adminOrScope. Routes add their own
// checks: POST /session is for ferry's origins only, GET /s3/params refuses
// cross-site browser requests, and the routes that open uploads or exports
// take a per-user rate limit (limits.go), as refused credentials take one
// per client address.
//
// JSON bodies are read by bindJSON (bind.go): application/json only (415
// otherwise), strict decoding, and problem details that describe the body
// in JSON's terms, never in Go's.
//
// openapi.yaml, embedded here, is the API contract (OpenAPI 3.1), served
// as /openapi.json and /openapi.yaml with a reference page at /docs
// (openapi.go). A test holds it to the router's routes both ways, and the
// e2e suites validate their traffic against it: a route, field or status
// changes the document in the same commit.
package server
