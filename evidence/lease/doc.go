// Package lease makes one gateway process at a time the writer of an
// instance name in an evidence store.
//
// A gateway's records name their instance, and a gateway finalises the
// requests its instance left unfinished (recovery writes their manifests).
// Two live processes started with one instance name on one store would
// each take the other's running requests for abandoned ones and write
// interrupted manifests into the middle of them. The instance lease stops
// the second process before it claims, recovers or writes anything.
//
// The store is create-only, so the lease is made of objects that are only
// ever added:
//
//	instances/<name>/lease/<epoch>         the lease of one process (epoch 1, 2, …)
//	instances/<name>/lease/<epoch>.closed  written when that process stops cleanly
//	instances/<name>/heartbeat/<epoch>/<n> its heartbeats, n = 1, 2, … one per period
//
// A process takes the next epoch create-only, so of two starting at once
// each gets its own. Before that it looks at the newest epoch: closed, the
// name is free; open, it watches the holder's heartbeats for three
// periods. One that appears means a live holder, and the process refuses
// to start, naming it. None means the holder is dead (or paused), and the
// process takes the name over.
//
// A holder renews by storing its next heartbeat and then listing the
// epochs: one newer than its own fences it for good. Its lease is valid
// for two and a half periods from the start of its last renewal, less
// than the three a newcomer waits from seeing its newest heartbeat, so a
// holder that was paused (SIGSTOP, a frozen VM) and wakes up finds out
// before it acts: Held renews first when the validity has lapsed. Nothing
// of this is on a call's path but an atomic load and a clock read; the
// store sees one heartbeat and one listing per period.
//
// Lease records and heartbeats carry an Ed25519 seal (see evidence/trust)
// when the gateway signs. Safety decisions are taken conservatively on
// what exists, sealed or not: any newer epoch fences a holder, any new
// heartbeat keeps a newcomer out, so a forged record can stop a gateway
// but never let two write. A closed marker lets the next process start
// without waiting, so it counts only when its seal opens. Records whose
// seal fails are reported as tampering.
package lease
