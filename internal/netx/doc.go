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
// resets, stalls confirmed by a probe), closing its idle pooled connections,
// and probes it back in once it passes RecoverAfter consecutive probes (so a
// flapping path stays out). Stall detection is per request: a request in
// flight is aborted only when its own connection has moved no byte for
// FailAfter while it waited on the network and a probe of its pair fails,
// so one black-holed connection is caught even while its siblings stream,
// and a request still moving bytes, however slowly, is never aborted.
// Requests that
// are safe to replay (idempotent methods whose body is empty or can be
// re-created with GetBody) are retried on another pair. Transport is also an
// http.RoundTripper, so an ordinary http.Client (for example the one inside
// the AWS SDK's S3 client) spreads its requests over all of a node's
// addresses and all of the client host's interfaces.
package netx
