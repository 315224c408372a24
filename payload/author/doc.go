// Package author turns a finished author run (Claude Code, headless, in the
// author job) into the stage's outputs:
//
//   - response.json: the stream-json transcript as a Responses-API object
//     (ParseStreamJSON, Transcript.Response);
//   - change.diff: the policy's edits to recipe.yaml and NeMo-RL/ against the
//     baseline commit, as a git patch with binary hunks;
//   - the NEMORL_ENV_AUTHOR_RESULT record (record.Author) describing both.
//
// The payload calls Baseline on the fresh work dir before it starts Claude
// Code (`nemorl-slurm payload author-baseline`), and Finish after Claude
// Code has exited or was killed at the research time limit
// (`nemorl-slurm payload author-finish`), then prints the record with
// record.Write.
//
// Every git command runs with an environment and config of its own (no
// system or global config, no hooks, no fsmonitor, no signing); Finish
// makes the diff in a private repository that only borrows the work dir's
// objects, so nothing the policy wrote into .git takes part.
package author
