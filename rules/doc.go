// Package rules decides an episode's outcome: who could have caused what
// happened decides the reward (the README's attribution table). Decide is
// a pure function of the Facts the engine gathered (Slurm's account of each
// job, the stage outputs and records it read, the cancels it issued, the
// ledger's seal): it returns a Verdict (scored, policy_failure with reward
// 0, infra_failure or integrity_violation, masked), the facts it still
// needs, or the engine's next step. It does no I/O and keeps no state.
//
// The rows of Table are tried in order; each belongs to one column of the
// table (Who). reasons.go holds the failure reasons every outcome names;
// the property and table tests hold the rows to the README's table.
package rules
