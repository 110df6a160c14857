// Package netx is Slipstream's multihoming layer: a node listens on every one
// of its addresses (never on all interfaces by default) and sends to peers
// over every pair of (local interface, remote address) at once, without
// bonding.
//
// Listen opens one listener per configured address; CountListener wraps a
// listener with per-interface byte counters that keep sendfile working.
//
// Transport keeps one http.Transport per local source address (a net.Dialer
// bound to that address, so per-NIC policy routing sends the traffic out of
// that NIC), picks for every request the least-loaded (local, remote) pair
// (fewest requests in flight on the local interface plus on the remote
// address; ties go round-robin), takes a pair out when it fails (dial errors,
// resets, stalls confirmed by a probe) and probes it back in; requests in
// flight on a pair are aborted only when it has moved no byte for FailAfter
// and a probe fails. Requests that
// are safe to replay (idempotent methods whose body is empty or can be
// re-created with GetBody) are retried on another pair. Transport is also an
// http.RoundTripper, so an ordinary http.Client (for example the one inside
// the AWS SDK's S3 client) spreads its requests over all of a node's
// addresses and all of the client host's interfaces.
package netx
