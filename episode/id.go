// Package episode is the engine that runs one author → train → eval chain:
// it stages and submits the jobs, watches them (one poll loop for run,
// watch and serve), gathers the facts rules.Decide asks for and does what
// it says (submit the next stage, retry, record the outcome), and adopts
// jobs after a crash. The ledger (package ledger) keeps its state; the
// attribution rule is package rules'.
package episode
