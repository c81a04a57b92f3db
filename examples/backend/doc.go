// Command backend is a small host app that plugs ferry in: the example of
// docs/integrate.md, meant to be read and copied.
//
// The app has its own users (a fixed list here, alice, bob and carol by
// default) and its own domain objects (posts, named by any short id). It
// shows the five things a backend does with ferry:
//
//  1. It is the identity provider. It holds an Ed25519 key, publishes the
//     public half as a JWK Set on /.well-known/jwks.json, and mints a JWT
//     for each user who signs in (POST /login). ferry, started with
//     FERRY_JWT_ISSUER, FERRY_JWT_AUDIENCE and FERRY_JWT_JWKS_URL pointing
//     here, takes those tokens as its users: the ferry user for
//     (issuer, sub) is created on first sight. The app never copies its
//     users into ferry.
//  2. It holds a service key (fsk_…, from an administrator of ferry) and
//     never gives it to a browser. With it the app asks ferry for an
//     upload ticket (POST /tickets) when a user wants to attach a file to
//     a post: the ticket names the user by the JWT subject and carries
//     trusted metadata, {"post_id":"42","uploaded_by":"alice"}, that the
//     uploader cannot change (POST /posts/{post}/upload-ticket).
//  3. The user uploads straight to ferry with the ticket (the JS SDK,
//     Uppy, or `ferry upload --ticket`); the bytes never pass through the
//     app.
//  4. ferry tells the app when the file is verified: a signed
//     upload.completed webhook, which notify/receiver verifies,
//     deduplicates and hands to the app (POST /webhooks/ferry). The
//     trusted metadata says which post the file belongs to, so the app
//     records it there (GET /posts/{post} lists a post's files).
//  5. The uploader shares the file with another user of the app: the app
//     asks ferry for a download grant (POST /files/{id}/grants, by the
//     grantee's subject) and hands out the download URL, a link signed
//     for the grantee that works with Range and that ferry checks on every
//     request. Revoking the grant (DELETE /grants/{id}) stops the link on
//     its next request with 410.
//
// Routes of the app, all JSON:
//
//	GET    /.well-known/jwks.json                      the app's public signing keys (for ferry)
//	POST   /login {"user":"alice"}                     a JWT for the user (no password: a demo)
//	POST   /posts/{post}/upload-ticket                 an upload ticket for the caller, for this post
//	GET    /posts/{post}                               the post's files, as the webhooks told them
//	POST   /posts/{post}/files/{file}/grants {"user"}  the uploader shares a file; answers the grantee's download_url
//	DELETE /posts/{post}/files/{file}/grants/{grant}   the uploader stops sharing it
//	POST   /webhooks/ferry                             ferry's signed webhooks
//	GET    /healthz                                    200 while the app runs
//
// Every route but the first, /login, the webhook and /healthz needs
// "Authorization: Bearer <JWT>" from /login. The same JWT is the user's
// credential at ferry (GET /me, GET /files): in this example the app's
// session token and the token ferry accepts are one, to keep it short; a
// real app keeps its own session and mints short-lived tokens for ferry.
//
// Configuration is by flags, each with an environment variable (run with
// -h for the list): where ferry is (-ferry-url), the service key
// (-service-key, with the scopes tickets:create and grants:create, and
// webhooks:manage unless -webhook-secret is given), where the app listens
// (-addr) and how ferry reaches it (-public-url, which is also the JWT
// issuer). Without -webhook-secret the app registers its own webhook at
// start-up (or rotates the secret of the one it registered before) and
// keeps the secret in memory.
//
// What this example leaves out, and a real app must not: passwords or any
// real sign-in, a database (posts, grants and the receiver's record of
// processed webhooks live in memory and are lost on restart; use
// receiver.SQLStore and your own tables), and key rotation (publish a new
// key in the JWK Set before signing with it; keep the old one until its
// tokens expire).
package main
