// Package notify tells business backends about finished work through
// signed webhooks.
//
// It starts with the transactional outbox: domain packages call Emit inside
// the same database transaction as the state change an event describes, so
// an event exists if and only if the change committed, and each change
// produces exactly one event id. Delivery reads the outbox afterwards, in
// three steps:
//
//   - Dispatch (every replica runs RunDispatcher) fans each new outbox
//     event out into one delivery per matching, active subscription and
//     queues a job for each. An event is claimed by a conditional UPDATE of
//     its dispatched_at inside the transaction that writes its deliveries
//     and jobs, and deliveries are unique per (event, subscription), so the
//     fan-out happens exactly once however many replicas race.
//   - The sender is a jobs handler (KindDeliver): one job per delivery and
//     round, so exactly one worker attempts a delivery at a time. Each
//     attempt POSTs the outbox payload bytes unchanged, with the Standard
//     Webhooks headers: webhook-id (the event id, the same on every attempt
//     and every redelivery), webhook-timestamp (fresh on every attempt) and
//     webhook-signature ("v1,<base64 HMAC-SHA256(key, id.ts.body)>", one
//     more for each rotated-out secret still in its own grace period, at
//     most MaxPreviousSecrets). A 2xx whose answer (up to 64 KiB of it)
//     arrived within the attempt's timeout is delivered. Anything else is
//     retried after the stepped schedule's next delay, or the receiver's
//     Retry-After when longer, until Config.MaxAttempts; then the
//     delivery is failed, visible in the admin API and redeliverable. A
//     410 fails the delivery and disables the subscription; a target the
//     SSRF guard refuses fails it at once. Every attempt is recorded with
//     its time, status, error and duration, while its delivery exists.
//   - Receivers verify, claim the webhook-id, process and mark it done,
//     in that order, without depending on ferry still waiting; package
//     notify/receiver does it for Go backends.
//
// Delivery is at least once: a worker that dies after the receiver
// answered but before recording it leaves the job to be retried, with the
// same webhook-id, which is what receivers deduplicate on.
//
// Requests time out after 10 s, follow no redirects, use no proxy and read
// at most 64 KiB of the answer. Targets are guarded against SSRF at dial
// time: the host is resolved once, every address must be public (outside
// every block of the IANA IPv4 and IPv6 special-purpose registries, and
// for IPv6 inside global unicast; an IPv6 form that embeds an IPv4
// address, such as IPv4-mapped, NAT64, 6to4 or Teredo, is judged by that
// IPv4 address), and the connection goes to a checked address, so a name
// that rebinds to an internal address after registration is still
// refused. Config.AllowPrivate lifts the check for tests and development.
// Registration also refuses URLs that could never be delivered to: ports
// outside 1–65535, spaces or control characters, interface zones, and a
// second active subscription sending the same event to the same URL.
//
// Logs name a subscription subscription_id and an event webhook_id (the
// header receivers see), and never carry a subscription's URL, which may
// hold the receiver's own token.
package notify
