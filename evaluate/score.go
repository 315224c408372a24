package evaluate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/nemorl/nemorl-slurm/record"
)

// DefaultPrompt is the instruction the eval puts before each AIME25
// question in the single user message it sends (the reference's prompt).
const DefaultPrompt = "Solve the following math problem. Work step by step and put your final answer inside \\boxed{}.\n\n"

// MaxRowBytes bounds one rollouts line. A 32K-token answer is a few hundred
// KB of JSON.
const MaxRowBytes = 32 << 20

// ScoreOptions is what Score needs besides the rollouts.
type ScoreOptions struct {
	// Questions are the 30 AIME25 questions in dataset order (LoadQuestions).
	Questions []string
	// Prompt precedes each question in the user message; "" means
	// DefaultPrompt.
	Prompt string
	// SlurmJobID is the eval job's id ($SLURM_JOB_ID); WeightsSHA256 the
	// sha256 CheckWeights computed. Both go into the record.
	SlurmJobID    string
	WeightsSHA256 string
	// WandbURL is copied into the record ("" when W&B is not used).
	WandbURL string
	// Contamination is the check of the author's patch
	// (CheckContamination), bound into the record; a contaminated patch is
	// not scored (ContaminatedRecord).
	Contamination ContaminationCheck
	// GPU is the eval job's GPU, written into the record. nil: ScoreFiles
	// reads it in the job (JobGPU); Score writes none.
	GPU *record.GPU
	// Warn receives what is worth saying without failing (the GPU not
	// read); nil: standard error.
	Warn io.Writer
}

// Score reads NeMo Gym's evaluation rollouts and returns the eval record.
//
// The rollouts format is `gym eval run --output FILE` JSON Lines: one JSON
// object per line per rollout, in any order. Score reads these members and
// ignores the rest (response, expected_answer, …):
//
//	reward                                 number, required: exactly 0 or 1
//	responses_create_params.input[0].content
//	                                       string, required: Prompt + question
//	question                               string, optional: if present, equal
//	                                       to the question in the prompt
//	_ng_task_index                         integer, optional: if present on a
//	                                       row, required on all; one per question
//	_ng_rollout_index                      integer, optional (with the task
//	                                       index): unique per task
//
// The question of a row is its prompt with Prompt removed, as in the
// reference evaluator. Blank lines are malformed rows; a final newline is
// optional.
//
// failures is Gym's failed-rollouts sidecar (`<stem>_failures.jsonl`); nil
// or whitespace-only means no failures, anything else rejects. Then, each
// failing check is a *Rejection: every row must be well formed and name one
// of opts.Questions; every reward 0 or 1; each question exactly 8 answers
// (so exactly 240 rows). reward = correct / 240.
func Score(rollouts io.Reader, failures io.Reader, opts ScoreOptions) (record.Eval, error) {
	if err := checkOptions(&opts); err != nil {
		return record.Eval{}, err
	}
	if failures != nil {
		if rej, err := checkFailures(failures); rej != nil || err != nil {
			if err != nil {
				return record.Eval{}, err
			}
			return record.Eval{}, rej
		}
	}

	index := make(map[string]int, len(opts.Questions))
	for i, q := range opts.Questions {
		index[q] = i
	}
	counts := make([]int, len(opts.Questions))
	correct := make([]int, len(opts.Questions))
	taskOf := make([]int64, len(opts.Questions)) // task index per question, -1 unset
	for i := range taskOf {
		taskOf[i] = -1
	}
	questionOfTask := map[int64]int{}
	seenRollout := map[[2]int64]int{} // (task, rollout) -> line
	usesIndexes := -1                 // unknown until the first row

	h := sha256.New()
	sc := bufio.NewScanner(io.TeeReader(rollouts, h))
	sc.Buffer(make([]byte, 0, 64<<10), MaxRowBytes)
	line := 0
	for sc.Scan() {
		line++
		row, rej := parseRow(sc.Bytes(), line)
		if rej != nil {
			return record.Eval{}, rej
		}
		q, ok := strings.CutPrefix(row.content, opts.Prompt)
		qi, known := index[q]
		if !ok || !known {
			return record.Eval{}, rejectLine(ReasonUnknownQuestion, line, "the prompt is not the eval prompt followed by one of the %d AIME25 questions: %s", len(opts.Questions), abbrev(row.content))
		}
		if row.question != nil && *row.question != q {
			return record.Eval{}, rejectLine(ReasonQuestionField, line, "question field %s differs from the question in the prompt %s", abbrev(*row.question), abbrev(q))
		}
		has := 0
		if row.task != nil {
			has = 1
		}
		if usesIndexes == -1 {
			usesIndexes = has
		} else if usesIndexes != has {
			return record.Eval{}, rejectLine(ReasonMalformedRow, line, "_ng_task_index present on some rows and absent on others")
		}
		if row.task != nil {
			t := *row.task
			if prev, ok := questionOfTask[t]; ok && prev != qi {
				return record.Eval{}, rejectLine(ReasonMalformedRow, line, "task index %d names two different questions (%d and %d)", t, prev+1, qi+1)
			}
			if taskOf[qi] != -1 && taskOf[qi] != t {
				return record.Eval{}, rejectLine(ReasonDuplicateQ, line, "question %d appears under task indexes %d and %d: %s", qi+1, taskOf[qi], t, abbrev(q))
			}
			taskOf[qi], questionOfTask[t] = t, qi
			if row.rollout != nil {
				key := [2]int64{t, *row.rollout}
				if prev, ok := seenRollout[key]; ok {
					return record.Eval{}, rejectLine(ReasonDuplicateRollout, line, "task %d rollout %d already on line %d", t, *row.rollout, prev)
				}
				seenRollout[key] = line
			}
		}
		counts[qi]++
		if row.reward == 1 {
			correct[qi]++
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return record.Eval{}, rejectLine(ReasonRowTooLarge, line+1, "longer than %d bytes", MaxRowBytes)
		}
		return record.Eval{}, fmt.Errorf("evaluate: reading rollouts: %w", err)
	}
	for i, n := range counts {
		if n > record.SamplesPerProblem {
			return record.Eval{}, &Rejection{Reason: ReasonExtraAnswers,
				Detail: fmt.Sprintf("question %d has %d answers, want %d: %s", i+1, n, record.SamplesPerProblem, abbrev(opts.Questions[i]))}
		}
	}
	for i, n := range counts {
		if n < record.SamplesPerProblem {
			return record.Eval{}, &Rejection{Reason: ReasonMissingAnswers,
				Detail: fmt.Sprintf("question %d has %d answers, want %d (%d rows in all): %s", i+1, n, record.SamplesPerProblem, line, abbrev(opts.Questions[i]))}
		}
	}

	total := 0
	for _, c := range correct {
		total += c
	}
	reward := record.RewardFor(total)
	ev := record.Eval{
		Reward: reward, AIME25Exact: reward, AIME25AvgAt8: reward, Completed: 1,
		WandbURL: opts.WandbURL, SlurmJobID: opts.SlurmJobID, WeightsSHA256: opts.WeightsSHA256,
		RolloutsSHA256: hex.EncodeToString(h.Sum(nil)),
		Problems:       record.Problems, SamplesPerProblem: record.SamplesPerProblem,
		Correct: total, PerQuestionCorrect: correct,
	}
	opts.Contamination.Bind(&ev)
	if opts.GPU != nil {
		ev.SetGPU(*opts.GPU)
	}
	if err := ev.Validate(); err != nil {
		return record.Eval{}, fmt.Errorf("evaluate: built an invalid record: %w", err)
	}
	return ev, nil
}

// ScoreFiles is Score on files, in the eval job: the record names the
// job's GPU (opts.GPU, else JobGPU's). A failuresPath that does not exist
// means no failures (Gym writes the sidecar only when some rollout
// failed); "" skips the failures check.
func ScoreFiles(rolloutsPath, failuresPath string, opts ScoreOptions) (record.Eval, error) {
	if err := checkOptions(&opts); err != nil {
		return record.Eval{}, err
	}
	if opts.GPU == nil {
		g := JobGPU(context.Background(), opts.Warn)
		opts.GPU = &g
	}
	var failures io.Reader
	if failuresPath != "" {
		ff, err := os.Open(failuresPath)
		switch {
		case err == nil:
			defer ff.Close()
			failures = ff
		case errors.Is(err, os.ErrNotExist):
		default:
			return record.Eval{}, err
		}
	}
	rf, err := os.Open(rolloutsPath)
	if err != nil {
		return record.Eval{}, err
	}
	defer rf.Close()
	return Score(rf, failures, opts)
}

func checkOptions(o *ScoreOptions) error {
	if o.Prompt == "" {
		o.Prompt = DefaultPrompt
	}
	if len(o.Questions) != record.Problems {
		return fmt.Errorf("evaluate: %d questions given, want %d", len(o.Questions), record.Problems)
	}
	seen := map[string]bool{}
	for _, q := range o.Questions {
		if seen[q] {
			return fmt.Errorf("evaluate: duplicate question given: %s", abbrev(q))
		}
		seen[q] = true
	}
	if !record.IsJobID(o.SlurmJobID) {
		return fmt.Errorf("evaluate: slurm job id %q is not a job id", o.SlurmJobID)
	}
	if !record.IsSHA256Hex(o.WeightsSHA256) {
		return fmt.Errorf("evaluate: weights sha256 %q is not 64 lowercase hex digits", o.WeightsSHA256)
	}
	if o.Contamination.Report.Contaminated {
		return fmt.Errorf("evaluate: the patch is contaminated: its weights are not scored")
	}
	if o.GPU != nil {
		if err := o.GPU.Validate(); err != nil {
			return fmt.Errorf("evaluate: the GPU: %w", err)
		}
	}
	// The record's own rules for wandb_url and the check's hashes, checked
	// before reading.
	probe := record.Eval{Reward: 0, Completed: 1, SlurmJobID: o.SlurmJobID, WeightsSHA256: o.WeightsSHA256,
		RolloutsSHA256: o.WeightsSHA256, Problems: record.Problems, SamplesPerProblem: record.SamplesPerProblem,
		PerQuestionCorrect: make([]int, record.Problems), WandbURL: o.WandbURL}
	o.Contamination.Bind(&probe)
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("evaluate: %w", err)
	}
	return nil
}

// checkFailures rejects a failures file holding anything but whitespace.
func checkFailures(r io.Reader) (*Rejection, error) {
	br := bufio.NewReader(r)
	line := 1
	for {
		c, err := br.ReadByte()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("evaluate: reading failures: %w", err)
		}
		switch c {
		case '\n':
			line++
		case ' ', '\t', '\r':
		default:
			return &Rejection{Reason: ReasonFailedRollouts, Line: line,
				Detail: "Gym reported failed rollouts (the failures file is not empty)"}, nil
		}
	}
}

type row struct {
	reward   float64
	content  string
	question *string
	task     *int64
	rollout  *int64
}

type rawRow struct {
	Reward       json.RawMessage `json:"reward"`
	Question     *string         `json:"question"`
	TaskIndex    *int64          `json:"_ng_task_index"`
	RolloutIndex *int64          `json:"_ng_rollout_index"`
	Params       *struct {
		Input []struct {
			Content json.RawMessage `json:"content"`
		} `json:"input"`
	} `json:"responses_create_params"`
}

func parseRow(b []byte, line int) (row, *Rejection) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return row{}, rejectLine(ReasonMalformedRow, line, "not a JSON object")
	}
	var r rawRow
	if err := json.Unmarshal(b, &r); err != nil {
		return row{}, rejectLine(ReasonMalformedRow, line, "%v", err)
	}
	out := row{question: r.Question, task: r.TaskIndex, rollout: r.RolloutIndex}
	if r.Params == nil || len(r.Params.Input) == 0 {
		return row{}, rejectLine(ReasonMalformedRow, line, "no responses_create_params.input")
	}
	content := r.Params.Input[0].Content
	if len(content) == 0 || content[0] != '"' {
		return row{}, rejectLine(ReasonMalformedRow, line, "responses_create_params.input[0].content is not a string")
	}
	if err := json.Unmarshal(content, &out.content); err != nil {
		return row{}, rejectLine(ReasonMalformedRow, line, "content: %v", err)
	}
	if r.RolloutIndex != nil && r.TaskIndex == nil {
		return row{}, rejectLine(ReasonMalformedRow, line, "_ng_rollout_index without _ng_task_index")
	}
	if r.TaskIndex != nil && *r.TaskIndex < 0 {
		return row{}, rejectLine(ReasonMalformedRow, line, "negative _ng_task_index")
	}
	if r.RolloutIndex != nil && *r.RolloutIndex < 0 {
		return row{}, rejectLine(ReasonMalformedRow, line, "negative _ng_rollout_index")
	}
	rw := bytes.TrimSpace(r.Reward)
	switch {
	case len(rw) == 0:
		return row{}, rejectLine(ReasonMissingReward, line, "no reward")
	case rw[0] != '-' && (rw[0] < '0' || rw[0] > '9'):
		return row{}, rejectLine(ReasonNonBinaryReward, line, "reward %s is not a number", abbrev(string(rw)))
	}
	v, err := strconv.ParseFloat(string(rw), 64)
	if err != nil || (v != 0 && v != 1) {
		return row{}, rejectLine(ReasonNonBinaryReward, line, "reward %s is neither 0 nor 1", abbrev(string(rw)))
	}
	out.reward = v
	return out, nil
}

// LoadQuestions reads the AIME25 JSON Lines the eval uses (each row has a
// string `question`, other members ignored) and returns the questions in
// file order: exactly 30, all distinct, non-empty, else a *Rejection with
// reason bad_questions (duplicate_question for a repeated one).
func LoadQuestions(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var qs []string
	seen := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		var row struct {
			Question *string `json:"question"`
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] != '{' {
			return nil, rejectLine(ReasonBadQuestions, line, "not a JSON object")
		}
		if err := json.Unmarshal(b, &row); err != nil {
			return nil, rejectLine(ReasonBadQuestions, line, "%v", err)
		}
		if row.Question == nil || *row.Question == "" {
			return nil, rejectLine(ReasonBadQuestions, line, "no question")
		}
		if prev, ok := seen[*row.Question]; ok {
			return nil, rejectLine(ReasonDuplicateQ, line, "same question as line %d", prev)
		}
		seen[*row.Question] = line
		qs = append(qs, *row.Question)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("evaluate: reading questions: %w", err)
	}
	if len(qs) != record.Problems {
		return nil, &Rejection{Reason: ReasonBadQuestions, Detail: fmt.Sprintf("%d questions, want %d", len(qs), record.Problems)}
	}
	return qs, nil
}

func abbrev(s string) string {
	const max = 60
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.Quote(s)
}
