// Package multihome proves multihoming end to end on the network-namespace
// testbed (package testbed): real `slipstream node` processes, one per
// storage namespace with public and intra addresses on both of its NICs,
// and GET loads from client namespaces through the smart client (package
// client). The tests check that every NIC of every storage host carries
// traffic and that a NIC pulled during a load costs no client-visible
// error; the benchmark (SLIPSTREAM_BENCH=1) compares one NIC per host with
// two at 1 Gbit/s per NIC and writes docs/bench-multihoming.md. Everything
// needs root; without it, or with -short, the tests skip with the reason.
package multihome
