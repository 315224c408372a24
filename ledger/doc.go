// Package ledger is the local, crash-safe record of every episode: one
// JSON file per episode (Entry: the plan, the intent to submit and each
// job id, what was collected, the outcome), replaced atomically on every
// change and sealed (seal.go) so that an entry changed behind the tool's
// back is seen; per-episode locks (locks.go) so that one process advances
// an episode at a time; and cancel requests from other processes. The
// engine (package episode) reads and writes it; list, report and resume
// read it.
package ledger
