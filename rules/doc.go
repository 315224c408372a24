// Package rules decides an episode's outcome: who could have caused what
// happened decides the reward (the attribution table of docs/episode.md). Decide is
// a pure function of the Facts the engine gathered (Slurm's account of each
// job, the stage outputs and records it read, the cancels it issued, the
// ledger's seal): it returns a Verdict (scored, policy_failure with reward
// 0, infra_failure or integrity_violation, masked), the facts it still
// needs, or the engine's next step. It does no I/O and keeps no state.
//
// The rows of the table (Rules, a copy) are tried in order; each belongs
// to one column of docs/episode.md's table (Who). Each row is a pure function
// of the facts returning its Result (a verdict, the facts it needs, a
// wait, and what it verified or checked on the way); no row reads what
// another returned, and Decide folds the results in order, the first
// that stops deciding, into one Decision. reasons.go holds the failure
// reasons every outcome names; the property and table tests hold the rows
// to docs/episode.md's table, and the permutation test shuffles the rows whose
// order carries nothing.
package rules
