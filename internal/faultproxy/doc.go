// Package faultproxy is a TCP proxy for tests that breaks the path between
// ferry and what it depends on (S3, MariaDB) on demand.
//
// A Proxy listens on 127.0.0.1 and forwards every connection to one target
// address. While it runs, a test can switch faults on and off; each change
// applies at once to the connections already open as well as to new ones:
//
//   - SetLatency delays every chunk by a fixed one-way latency in each
//     direction, without lowering throughput (a chunk waits until it is
//     old enough, so a request-response round trip gains twice the
//     latency);
//   - SetBandwidth caps the bytes per second in one direction, shared by
//     all connections, like a slow link;
//   - ResetAfter resets connections (TCP RST, "connection reset by peer"
//     on both sides) once they have carried n more bytes in a direction;
//     ResetAll resets every open connection now;
//   - StallAfter lets n more bytes through in a direction and then holds
//     the rest without closing anything, like a frozen (SIGSTOPped)
//     server: StallAfter(Upstream, 0, 0) accepts connections and never
//     answers, StallAfter(Downstream, n, 0) stops a response mid-body,
//     and StallAfter(Upstream, n, 1) holds only the first connection to
//     send n bytes, like one connection that died without a reset. Held
//     bytes flow again after Heal, as after SIGCONT;
//   - Refuse closes the listener, so new connections are refused
//     (ECONNREFUSED) until Accept (or Heal) listens again on the same
//     port; RefuseFor does that for a while.
//
// Heal clears every fault. Stats counts what went through and what was
// injected, so a test can show that its fault really happened.
//
// Directions are named from the client's side: Upstream is client to
// target (requests, PUT bodies, SQL), Downstream is target to client
// (responses, GET bodies, result sets).
//
// Why not Toxiproxy: github.com/Shopify/toxiproxy/v2 (v2.5.0 is the newest
// the module proxy serves) cannot reset an established connection after a
// byte count. Its reset_peer toxic sets SO_LINGER only on links opened
// while the toxic is present and fires on the first chunk after a delay,
// and limit_data closes with a FIN, not a reset; it has no stall after a
// byte count (its timeout toxic drops data rather than holding it), and
// new toxic types go into a package-global registry. The proxy here is
// small, stdlib-only apart from golang.org/x/time/rate for the token
// bucket, and does exactly the faults issue 15 needs.
package faultproxy
