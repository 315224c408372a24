// Package train is the train stage's launcher: what the train job runs
// (`nemorl-slurm payload train …`) inside the train image on one GPU.
//
// Run, in order:
//
//  1. applies the policy's change.diff to the node-local copy of the pinned
//     checkouts (ApplyPatch: `git apply --check`, then `git apply`, in
//     Plan.WorkDir, with a clean git environment);
//  2. rewrites train_math.jsonl into the NeMo Gym rows the trainer reads
//     (GymRows, as the reference launch_inner.py does);
//  3. runs NeMo RL's examples/nemo_gym/run_grpo_nemo_gym.py with the
//     policy's recipe.yaml plus Hydra overrides that pin what the policy may
//     not change (Plan.TrainerArgv), in its own process group, its output
//     copied to WorkDir/train.log and to the job's log;
//  4. stops the trainer if it is still running at Plan.Deadline plus a grace
//     (TERM to the group, KILL after Plan.KillAfter);
//  5. takes the last "• Avg Reward:" the trainer logged (ParseAvgReward)
//     and the highest results/grpo/step_N checkpoint;
//  6. converts step_N/policy/weights (DCP) to bf16 model.safetensors with
//     the bundle's export script (Plan.ExportArgv);
//  7. prints exactly one NEMORL_ENV_TRAIN_RESULT= record (record.Train),
//     naming the job's GPU as nvidia-smi reported it before step 1
//     (record.QueryGPU for Plan.GPUs; none when it cannot be read).
//
// The reference is NeMo Gym's responses_api_agents/nemorl_env/
// task_environment/{run.sh,launch_inner.py}; differences are documented
// where they occur.
//
// Exit codes of Run: ExitOK (status ok), ExitPolicyFailure (a record with
// any other status was printed), ExitInfra (a launcher or infrastructure
// fault: no record is printed, which the collector reads as
// missing_record).
package train
